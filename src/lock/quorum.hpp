#pragma once
// The majority rule of the Redlock algorithm, in one place. Of N servers a majority is
// N/2 + 1. A round over them (every script sent over the fan-out: acquire, fence, renew,
// release, the slot and queue scripts) is won with a majority of yes, and lost as soon as
// a majority of yes can no longer be reached; a reading of several servers (status, a
// waiter's estimate of when the lock can be free) counts by the same rule.

#include <cstddef>

namespace redlock::lock {

[[nodiscard]] constexpr size_t majority_of(size_t servers) {
    return servers / 2 + 1;
}

// Votes of one round over `total` servers.
struct Tally {
    size_t total = 0;
    size_t yes = 0;
    size_t no = 0;     // a definite answer against us (held by another, not our token)
    size_t failed = 0; // no usable answer (unreachable, timeout, error reply)

    [[nodiscard]] constexpr size_t majority() const { return majority_of(total); }
    [[nodiscard]] constexpr bool won() const { return yes >= majority(); }
    // A majority of yes can no longer be reached.
    [[nodiscard]] constexpr bool lost() const { return no + failed > total - majority(); }
    [[nodiscard]] constexpr bool decided() const { return won() || lost(); }
    // Lost by answers alone: enough servers said no that a majority can never say yes,
    // whatever the servers still silent answer.
    [[nodiscard]] constexpr bool refused() const { return no > total - majority(); }
    [[nodiscard]] constexpr size_t answered() const { return yes + no; }
};

} // namespace redlock::lock
