#pragma once
// The wait policy's decisions, as functions of what the last attempt said and of time, with
// no servers and no clock of their own: how long a waiter sleeps when no release notice
// comes, and over how long a crowd woken by one notice spreads its attempts. job/acquire
// calls them; tests/job drive them with a fake clock.

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
    std::optional<Millis> expiry{};             // until_expiry, or the leader's PTTL
    bool listening = false;                     // release notices are heard on some server
    bool too_slow = false;                      // the last attempt's round trips ate the lease
    bool fair = false;                          // --fair: the place in the queue needs beats
    std::optional<Clock::time_point> give_up{}; // --wait
};
// Until when a waiter sleeps, unless a release notice wakes it first: the holder's
// possible expiry, jittered so the waiters do not all come back at once (at most an hour;
// a second when it cannot tell); without notices, a short jittered retry, as waiters
// without pub/sub must; never past the --fair heartbeat or --wait.
[[nodiscard]] Clock::time_point sleep_until(const SleepInput& in, const Jitter& jitter);

// The spread between colliding waiters: a round trip apart lets the first one's request
// reach every server, and its "acquired" come back, before the next one tries (half or a
// quarter of it was measured slower: more collisions); at least 200 us.
[[nodiscard]] Micros backoff_unit(Clock::duration round_trip);

struct SpreadInput {
    Clock::duration round_trip{};
    std::optional<long long> herd{}; // waiters a release notice counted on its server
    size_t servers = 1;              // N
    size_t listened = 1;             // servers this waiter hears notices from
    size_t collided = 0;             // wakes in a row that came to nothing
};
// The window over which a waiter woken by a notice spreads its next attempt: a round trip
// per waiter the notice counted (scaled to all N servers, at most a second), and a window
// that doubles with each wake that came to nothing, as in Ethernet and Raft (at most 32
// round trips, at least 20 ms). A lone waiter waits for nothing.
[[nodiscard]] Micros spread_window(const SpreadInput& in);

} // namespace redlock::job
