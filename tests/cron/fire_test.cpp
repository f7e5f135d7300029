#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cron/fire.hpp"
#include "util/timestamp.hpp"

using namespace std::chrono;
using redlock::cron::fires_between;
using redlock::cron::Instant;
using redlock::cron::LocalTime;
using redlock::cron::next_fire;
using redlock::cron::next_match;
using redlock::cron::parse_schedule;
using redlock::cron::Schedule;
using redlock::cron::slot_text;
using redlock::cron::Zone;

namespace {

Instant utc(const char* iso) {
    auto t = redlock::util::parse_utc_timestamp(iso);
    REQUIRE_MESSAGE(t, iso);
    return floor<seconds>(*t);
}

Schedule schedule(const std::string& fields) {
    auto p = parse_schedule(fields + " x");
    REQUIRE_MESSAGE(p, fields);
    return p->schedule;
}

Zone zone(const char* name) {
    auto z = Zone::load(name);
    REQUIRE(z);
    return *z;
}

// The first `n` fires after `from`, as REDLOCK_SLOT writes them.
std::vector<std::string> fires(const std::string& fields, const Zone& z, const char* from,
                               size_t n) {
    std::vector<std::string> out;
    for (Instant at : fires_between(schedule(fields), z, utc(from), Instant::max(), n))
        out.push_back(slot_text(at));
    return out;
}

std::vector<std::string> fires(const std::string& fields, const char* from, size_t n) {
    return fires(fields, Zone(), from, n);
}

using Slots = std::vector<std::string>;

} // namespace

TEST_CASE("a slot is written as ISO 8601 UTC to the second") {
    CHECK(slot_text(utc("2026-03-29T01:00:00Z")) == "2026-03-29T01:00:00Z");
    CHECK(slot_text(Instant{}) == "1970-01-01T00:00:00Z");
    CHECK(slot_text(utc("2099-12-31T23:59:59Z")) == "2099-12-31T23:59:59Z");
}

TEST_CASE("the next match is at or after the time given") {
    const LocalTime from{utc("2026-01-01T10:15:30Z").time_since_epoch()};
    auto at = [](const char* iso) { return LocalTime{utc(iso).time_since_epoch()}; };
    CHECK(next_match(schedule("30 10 * * *"), from) == at("2026-01-01T10:30:00Z"));
    CHECK(next_match(schedule("0 10 * * *"), from) == at("2026-01-02T10:00:00Z"));
    CHECK(next_match(schedule("* * * * *"), from) == at("2026-01-01T10:16:00Z"));
    CHECK(next_match(schedule("30 15 10 * * *"), from) == at("2026-01-01T10:15:30Z"));
    CHECK(next_match(schedule("0 0 1 jan *"), from) == at("2027-01-01T00:00:00Z"));
}

TEST_CASE("fires come strictly after the time given, in order") {
    CHECK(fires("*/20 * * * *", "2026-01-01T00:00:00Z", 4) ==
          Slots{"2026-01-01T00:20:00Z", "2026-01-01T00:40:00Z", "2026-01-01T01:00:00Z",
                "2026-01-01T01:20:00Z"});
    CHECK(fires("*/20 * * * *", "2026-01-01T00:00:59Z", 1) == Slots{"2026-01-01T00:20:00Z"});
    CHECK(fires("*/10 * * * * *", "2026-01-01T00:00:05Z", 3) ==
          Slots{"2026-01-01T00:00:10Z", "2026-01-01T00:00:20Z", "2026-01-01T00:00:30Z"});
    CHECK(fires("0 0 31 * *", "2026-01-31T00:00:00Z", 3) ==
          Slots{"2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z", "2026-07-31T00:00:00Z"});
    CHECK(fires("0 12 29 2 *", "2026-01-01T00:00:00Z", 2) ==
          Slots{"2028-02-29T12:00:00Z", "2032-02-29T12:00:00Z"});
    CHECK(fires("@yearly", "2026-06-01T00:00:00Z", 1) == Slots{"2027-01-01T00:00:00Z"});
    CHECK(fires("@weekly", "2026-01-01T00:00:00Z", 1) == Slots{"2026-01-04T00:00:00Z"});
}

TEST_CASE("two restricted day fields fire on either day, and a '*' in one needs both") {
    // Fridays and the 13th; Fridays that are the 13th.
    CHECK(fires("0 0 13 * 5", "2026-01-01T00:00:00Z", 4) ==
          Slots{"2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z", "2026-01-13T00:00:00Z",
                "2026-01-16T00:00:00Z"});
    CHECK(fires("0 0 */13 * 5", "2026-01-01T00:00:00Z", 2) ==
          Slots{"2026-02-27T00:00:00Z", "2026-03-27T00:00:00Z"});
    CHECK(fires("0 0 * * 0", "2026-01-01T00:00:00Z", 1) == Slots{"2026-01-04T00:00:00Z"});
    CHECK(fires("0 0 * * 7", "2026-01-01T00:00:00Z", 1) == Slots{"2026-01-04T00:00:00Z"});
}

TEST_CASE("@every counts its slots from the Unix epoch in UTC, whatever the zone") {
    CHECK(fires("@every 90s", "1970-01-01T00:01:40Z", 2) ==
          Slots{"1970-01-01T00:03:00Z", "1970-01-01T00:04:30Z"});
    CHECK(fires("@every 7m", zone("Europe/Berlin"), "2026-03-29T00:59:00Z", 2) ==
          Slots{"2026-03-29T01:02:00Z", "2026-03-29T01:09:00Z"});
    CHECK(fires("@every 1d", zone("Asia/Kolkata"), "2026-03-29T12:00:00Z", 1) ==
          Slots{"2026-03-30T00:00:00Z"});
}

TEST_CASE("fires_between gives the fires after one instant up to another, the earliest first") {
    const Schedule s = schedule("0 * * * *");
    CHECK(fires_between(s, Zone(), utc("2026-01-01T00:00:00Z"), utc("2026-01-01T03:00:00Z"), 10) ==
          std::vector<Instant>{utc("2026-01-01T01:00:00Z"), utc("2026-01-01T02:00:00Z"),
                               utc("2026-01-01T03:00:00Z")});
    CHECK(fires_between(s, Zone(), utc("2026-01-01T00:00:00Z"), utc("2026-01-01T03:00:00Z"), 2)
              .size() == 2);
    CHECK(fires_between(s, Zone(), utc("2026-01-01T00:00:00Z"), utc("2026-01-01T00:59:59Z"), 2)
              .empty());
}

TEST_CASE("a job's time in the hour the clocks skip runs when they jump, once") {
    const Zone berlin = zone("Europe/Berlin"); // 2026-03-29 02:00 CET -> 03:00 CEST at 01:00Z
    CHECK(fires("30 2 * * *", berlin, "2026-03-28T12:00:00Z", 3) ==
          Slots{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"});
    // Several times of one job in the gap are one run; 03:00 is that instant too.
    CHECK(fires("0,30 2 * * *", berlin, "2026-03-28T12:00:00Z", 2) ==
          Slots{"2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z"});
    CHECK(fires("0 2,3 * * *", berlin, "2026-03-28T12:00:00Z", 3) ==
          Slots{"2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T01:00:00Z"});
    // With seconds: a fixed minute and hour still make a fixed time.
    CHECK(fires("*/20 30 2 * * *", berlin, "2026-03-28T12:00:00Z", 2) ==
          Slots{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"});
    // @daily at midnight, where midnight is skipped (Havana jumps at 00:00 to 01:00).
    CHECK(fires("@daily", zone("America/Havana"), "2026-03-07T12:00:00Z", 2) ==
          Slots{"2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"});
}

TEST_CASE("a job's time in the hour the clocks repeat runs once, at its first occurrence") {
    const Zone berlin = zone("Europe/Berlin"); // 2026-10-25 03:00 CEST -> 02:00 CET at 01:00Z
    CHECK(fires("30 2 * * *", berlin, "2026-10-24T12:00:00Z", 2) ==
          Slots{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"});
    // Asked from inside the repeat, the second 02:30 is not a fire either.
    CHECK(fires("30 2 * * *", berlin, "2026-10-25T01:15:00Z", 1) == Slots{"2026-10-26T01:30:00Z"});
    CHECK(fires("*/20 30 2 * * *", berlin, "2026-10-25T00:30:30Z", 2) ==
          Slots{"2026-10-25T00:30:40Z", "2026-10-26T01:30:00Z"});
}

TEST_CASE("an hourly job follows real time across a change: no burst, no gap") {
    const Zone berlin = zone("Europe/Berlin");
    CHECK(fires("0 * * * *", berlin, "2026-03-28T23:30:00Z", 4) ==
          Slots{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z",
                "2026-03-29T03:00:00Z"});
    CHECK(fires("0 * * * *", berlin, "2026-10-24T23:30:00Z", 4) ==
          Slots{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z",
                "2026-10-25T03:00:00Z"});
    CHECK(fires("@hourly", berlin, "2026-10-24T23:30:00Z", 3) ==
          Slots{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"});
    // Lord Howe's 30-minute change: 02:00 does not exist, so 01:00 and 03:00 are 1h30 apart.
    CHECK(fires("0 * * * *", zone("Australia/Lord_Howe"), "2026-10-03T14:00:00Z", 3) ==
          Slots{"2026-10-03T14:30:00Z", "2026-10-03T16:00:00Z", "2026-10-03T17:00:00Z"});
}

TEST_CASE("a job with '*' in its minute or hour follows the clock as lived") {
    const Zone berlin = zone("Europe/Berlin");
    // Every minute of 02:xx: none on the day 02:xx is skipped...
    CHECK(fires("* 2 * * *", berlin, "2026-03-28T12:00:00Z", 1) == Slots{"2026-03-30T00:00:00Z"});
    // ...and each of them twice on the day it is repeated.
    const auto repeated = fires("* 2 * * *", berlin, "2026-10-24T12:00:00Z", 121);
    REQUIRE(repeated.size() == 121);
    CHECK(repeated[0] == "2026-10-25T00:00:00Z");
    CHECK(repeated[59] == "2026-10-25T00:59:00Z");
    CHECK(repeated[60] == "2026-10-25T01:00:00Z");
    CHECK(repeated[119] == "2026-10-25T01:59:00Z");
    CHECK(repeated[120] == "2026-10-26T01:00:00Z");
    CHECK(fires("*/30 2 * * *", berlin, "2026-10-24T12:00:00Z", 5) ==
          Slots{"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z",
                "2026-10-25T01:30:00Z", "2026-10-26T01:00:00Z"});
}

TEST_CASE("a zone without daylight saving has nothing skipped nor repeated") {
    CHECK(fires("30 2 * * *", zone("Asia/Kolkata"), "2026-03-28T12:00:00Z", 2) ==
          Slots{"2026-03-28T21:00:00Z", "2026-03-29T21:00:00Z"});
}
