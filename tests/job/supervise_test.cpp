#include <doctest/doctest.h>

#include "job/supervise.hpp"

using namespace std::chrono_literals;
using redlock::job::Clock;
using redlock::job::Millis;
using redlock::job::RenewalSchedule;
using redlock::job::StopSchedule;

namespace {
const Clock::time_point t0{std::chrono::hours(1000)};
}

TEST_CASE("a lost lease's TERM comes a third of the ttl before its end, KILL a tenth") {
    const StopSchedule s(30s);
    const auto end = t0 + 29700ms; // validity end of a 30 s lease sent at t0
    CHECK(s.term_at(end) == end - 10s);
    CHECK(s.kill_at(end) == end - 1s); // a tenth, at most a second
    CHECK(StopSchedule(3s).kill_at(end) == end - 300ms);
    CHECK(StopSchedule(3s).term_at(end) == end - 1s);
    // The shortest lease (100 ms) still leaves an order: TERM, KILL, then the end.
    const StopSchedule tiny(Millis(100));
    CHECK(tiny.term_at(end) < tiny.kill_at(end));
    CHECK(tiny.kill_at(end) < end);
}

TEST_CASE("a stop with the lease still held gives PROGRAM the grace, at most five seconds") {
    CHECK(StopSchedule(30s).stop_grace() == 5s);
    CHECK(StopSchedule(6s).stop_grace() == 2s);
}

TEST_CASE("renewals go every third of the ttl and are retried every tenth, 10 ms to 1 s") {
    const RenewalSchedule r(30s);
    CHECK(r.interval == 10s);
    CHECK(r.retry == 1s);
    CHECK(RenewalSchedule(300ms).retry == 30ms);
    CHECK(RenewalSchedule(50ms).retry == 10ms);
}

TEST_CASE("the next renewal goes a third of the ttl on, unless that is too near the TERM") {
    const RenewalSchedule r(30s);
    // A fresh lease: TERM at about 19.7 s, the renewal at 10 s.
    CHECK(r.next(t0, t0 + 19700ms, 1ms) == t0 + 10s);
    // A slow acquisition ate into the lease: the renewal goes half an interval before TERM.
    CHECK(r.next(t0, t0 + 12s, 1ms) == t0 + 7s);
    // Round trips near the ttl: two of them before the TERM, at once if need be.
    CHECK(r.next(t0, t0 + 19700ms, 9s) == t0 + 1700ms);
    CHECK(r.next(t0, t0 + 5s, 4s) == t0 - 3s);
}
