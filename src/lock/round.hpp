#pragma once
// One round of a script over the fan-out, as every lock kind uses it: the request
// (EVALSHA, with EVAL as the NOSCRIPT fallback; keys only as KEYS, values only as ARGV),
// each server's answer read as a vote (ServerResult), the votes counted by the majority
// rule (lock/quorum.hpp), and the round described for -v and for errors.

#include <chrono>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lock/quorum.hpp"
#include "lock/scripts.hpp"
#include "redis/connection.hpp"
#include "util/error.hpp"

namespace redlock::lock {

using Clock = redis::Clock;
using Millis = std::chrono::milliseconds;

// When a lease taken (or renewed) by a request sent at `sent` stops being safe to rely on.
[[nodiscard]] Clock::time_point validity_end(Clock::time_point sent, Millis ttl);

// How one server answered in a round, for -v and for error messages.
struct ServerResult {
    std::string server{};
    enum class Vote { yes, no, failed, none } vote = Vote::none;
    std::string detail{}; // "ok", "held", "timed out", "Connection refused", ...
    redis::ErrorCode error = redis::ErrorCode::other; // of an error reply
    bool auth_failure = false;
    bool abandoned = false; // not waited for once the round was decided (request was sent)
    bool written = true;    // false: the request did not run (failed before it left, refused)
    // Failed (AUTH refused), yet the script behind it ran to its end all the same: nothing
    // is left half done by it.
    bool ran_anyway = false;
    long long held_pttl = -2;       // acquire, held by another owner: its PTTL (-1: no expiry)
    bool every_permit_held = false; // --limit: held, and so is every other permit
    bool failed_in_round2 = false;  // said yes in round 1, then failed writing the fence
    Clock::duration latency{};
};

// EVALSHA (by_sha) or EVAL of `script` with `keys` and `args` (then `more_args`, so that a
// caller's stored arguments need not be copied after its own): the one encoder of script
// calls.
[[nodiscard]] std::string script_call(const Script& script, bool by_sha,
                                      std::span<const std::string> keys,
                                      std::span<const std::string> args,
                                      std::span<const std::string> more_args = {});
[[nodiscard]] std::string script_call(const Script& script, bool by_sha,
                                      std::initializer_list<std::string_view> keys,
                                      std::initializer_list<std::string_view> args = {});

// How one server's answer counts. Every script answers 1 (done: acquired, renewed,
// released; or a fence) or 0 (held by another owner / not our token); an acquire
// script's "held" carries the holder's PTTL.
[[nodiscard]] ServerResult classify(const redis::Connection& conn);
// The votes of the servers' answers so far.
[[nodiscard]] Tally tally(std::span<const redis::Connection> conns);
// The integer a server answered, if it did.
[[nodiscard]] std::optional<long long> integer_reply(const redis::Connection& conn);

// Two server entries whose requests went to one node (a cluster's MOVED, or the master two
// Sentinel entries name) are one lock server listed twice: a majority of them can never be
// won, since the one key there is each entry's vote. Said as a config error.
[[nodiscard]] std::optional<util::Error> shared_node(std::span<const redis::Connection> conns);

// The votes of a round already collected.
[[nodiscard]] Tally tally_of(const std::vector<ServerResult>& servers);

// "acquired on 3/5 servers in 1.2ms: a ok 0.3ms, b timed out, ..." style summary for -v.
[[nodiscard]] std::string describe_round(const std::vector<ServerResult>& servers);

// The error for a round that failed because too few servers answered: unavailable, or
// auth when a server refused our credentials or permissions. The message names each failed
// server and why; callers put what they were doing in front.
[[nodiscard]] util::Error quorum_error(const std::vector<ServerResult>& servers);

} // namespace redlock::lock
