#include <doctest/doctest.h>

#include "job/wait_policy.hpp"

using namespace std::chrono_literals;
using redlock::job::Clock;
using redlock::job::Jitter;
using redlock::job::Micros;
using redlock::job::Millis;
using redlock::job::sleep_until;
using redlock::job::until_expiry;
using redlock::lock::ServerResult;
using Vote = ServerResult::Vote;

namespace {

ServerResult held(long long pttl) {
    return ServerResult{.vote = Vote::no, .held_pttl = pttl};
}
ServerResult yes() {
    return ServerResult{.vote = Vote::yes};
}
ServerResult failed() {
    return ServerResult{.vote = Vote::failed};
}

// The fake clock's "now", and jitter that always picks the low or the high end.
const Clock::time_point t0{std::chrono::hours(1000)};
const Jitter low = [](Millis a, Millis) { return a; };
const Jitter high = [](Millis, Millis b) { return b; };

} // namespace

TEST_CASE("a waiter expects the lock free when a majority's keys have expired") {
    CHECK(until_expiry({held(5000)}) == Millis(5000));
    // Five servers, three needed: the third shortest PTTL.
    CHECK(until_expiry({held(100), held(900), held(300), held(700), held(500)}) == Millis(500));
    // A server where the failed attempt was released again counts as free already.
    CHECK(until_expiry({yes(), held(900), held(300)}) == Millis(300));
    CHECK(until_expiry({yes(), yes(), held(300)}) == Millis(0));
}

TEST_CASE("a lock that cannot expire by itself, or servers unheard, give no expiry") {
    CHECK_FALSE(until_expiry({held(-1)}));                      // no TTL
    CHECK_FALSE(until_expiry({held(100), failed(), failed()})); // one answer of three
    CHECK_FALSE(until_expiry({held(-1), held(-1), held(100)}));
    CHECK(until_expiry({held(-2)}) == Millis(0)); // gone meanwhile
}

TEST_CASE("a waiter sleeps until the holder could have expired, jittered, when it hears notices") {
    const auto until = sleep_until({.now = t0, .expiry = 5s, .listening = true}, low);
    CHECK(until == t0 + 5s + 1ms);
    CHECK(sleep_until({.now = t0, .expiry = 5s, .listening = true}, high) == t0 + 5s + 20ms);
    // No expiry known: a second; an expiry days away: a minute at most.
    CHECK(sleep_until({.now = t0, .listening = true}, low) == t0 + 1s + 1ms);
    CHECK(sleep_until({.now = t0, .expiry = 72h, .listening = true}, low) == t0 + 1min + 1ms);
}

TEST_CASE("without notices, or after too slow an attempt, a waiter retries soon") {
    CHECK(sleep_until({.now = t0, .expiry = 5s, .listening = false}, low) == t0 + 20ms);
    CHECK(sleep_until({.now = t0, .expiry = 5s, .listening = false}, high) == t0 + 200ms);
    CHECK(sleep_until({.now = t0, .expiry = 5s, .listening = true, .too_slow = true}, high) ==
          t0 + 200ms);
}

TEST_CASE("--fair without a wake channel beats every second; --wait ends every sleep") {
    CHECK(sleep_until({.now = t0, .expiry = 30s, .listening = true, .fair = true}, low) == t0 + 1s);
    CHECK(sleep_until({.now = t0, .expiry = 30s, .listening = true, .give_up = t0 + 2s}, low) ==
          t0 + 2s);
    CHECK(sleep_until(
              {.now = t0, .expiry = 30s, .listening = true, .fair = true, .give_up = t0 + 300ms},
              low) == t0 + 300ms);
}
