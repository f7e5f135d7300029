#pragma once
// The wait policy's decisions, as functions of what the last attempt said and of time, with
// no servers and no clock of their own: how long a waiter sleeps when no notice wakes it.
// (A crowd needs no spreading out: a release wakes only the first two waiters, on their own
// channels.) job/acquire calls them; tests/job drive them with a fake clock.

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "lock/round.hpp"

namespace redlock::job {

using Clock = lock::Clock;
using Millis = std::chrono::milliseconds;
using Micros = std::chrono::microseconds;

// A random duration in [low, high] (util::random_between); tests give a fixed one.
using Jitter = std::function<Millis(Millis low, Millis high)>;

// How long until the holder's key has expired on enough servers for a majority to be
// free, were it to stop renewing now: what a waiter sleeps at most when no release notice
// comes. nullopt when that cannot happen by expiry alone (a key with no TTL, servers that
// did not answer).
[[nodiscard]] std::optional<Millis> until_expiry(const std::vector<lock::ServerResult>& servers);

struct SleepInput {
    Clock::time_point now;
    std::optional<Millis> expiry{}; // until_expiry, or the leader's PTTL
    bool listening = false;         // release notices are heard on some server
    bool too_slow = false;          // the last attempt's round trips ate the lease
    bool fair = false; // --fair without a wake channel: the place in the queue needs beats
    std::optional<Clock::time_point> give_up{}; // --wait
};
// Until when a waiter sleeps, unless a release notice wakes it first: the holder's
// possible expiry, jittered so the waiters do not all come back at once (at most a
// minute: a release wakes two waiters, and the others sleep by the lease they saw, which
// may be a longer one than the next holder's; a second when it cannot tell); without
// notices, a short jittered retry, as waiters without pub/sub must; never past the --fair
// heartbeat or --wait.
[[nodiscard]] Clock::time_point sleep_until(const SleepInput& in, const Jitter& jitter);

} // namespace redlock::job
