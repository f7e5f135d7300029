#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cron/zone.hpp"
#include "util/timestamp.hpp"

using namespace std::chrono;
using redlock::cron::Instant;
using redlock::cron::LocalInstants;
using redlock::cron::LocalTime;
using redlock::cron::Zone;
using Kind = redlock::cron::LocalInstants::Kind;

namespace {

Instant utc(const char* iso) {
    auto t = redlock::util::parse_utc_timestamp(iso);
    REQUIRE_MESSAGE(t, iso);
    return floor<seconds>(*t);
}

LocalTime local(const char* iso) {
    return LocalTime{utc(iso).time_since_epoch()};
}

Zone zone(const char* name) {
    auto z = Zone::load(name);
    REQUIRE_MESSAGE(z, (z ? "" : z.error().message));
    return *z;
}

std::string refusal(const char* name) {
    auto z = Zone::load(name);
    REQUIRE_FALSE(z);
    CHECK(z.error().kind == redlock::util::ErrorKind::config);
    return z.error().message;
}

// The changes of offset that `zdump -v` lists for a zone in [from, until) years: the
// instant and the new offset of each, read from its "UT = ... gmtoff=N" lines,
// independently of the code tested.
std::vector<std::pair<long long, long long>> zdump_changes(const char* name, int from, int until) {
    const std::string command =
        "zdump -v -c " + std::to_string(from) + "," + std::to_string(until) + " " + name;
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
    REQUIRE(pipe);
    std::vector<std::pair<long long, long long>> out;
    std::array<char, 512> line{};
    bool first_of_pair = true;
    long long before = 0;
    while (std::fgets(line.data(), line.size(), pipe.get()) != nullptr) {
        std::string text(line.data());
        if (text.find("NULL") != std::string::npos)
            continue;
        // "Europe/Berlin  Sun Mar 29 01:00:00 2026 UT = ... gmtoff=7200": zdump prints
        // the second before each change, then the change.
        std::array<char, 8> weekday{}, month{};
        int day = 0, h = 0, m = 0, s = 0, year = 0;
        const auto ut = text.find("  ");
        REQUIRE(ut != std::string::npos);
        REQUIRE(std::sscanf(text.c_str() + ut, " %3s %3s %d %d:%d:%d %d UT", weekday.data(),
                            month.data(), &day, &h, &m, &s, &year) == 7);
        const auto gmtoff = std::stoll(text.substr(text.find("gmtoff=") + 7));
        const std::array<std::string, 12> months = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
        unsigned mon = 0;
        while (months[mon] != month.data())
            ++mon;
        const auto at = sys_days{std::chrono::year{year} / (mon + 1) / day} + hours(h) +
                        minutes(m) + seconds(s);
        if (!first_of_pair && gmtoff != before) // a change of name or isdst only is none
            out.emplace_back(at.time_since_epoch().count(), gmtoff);
        before = gmtoff;
        first_of_pair = !first_of_pair;
    }
    return out;
}

} // namespace

TEST_CASE("a zone is a name of the system's tz database") {
    CHECK(zone("Europe/Berlin").name() == "Europe/Berlin");
    CHECK(zone(":America/New_York").name() == "America/New_York");
    CHECK(zone("UTC").is_utc());
    CHECK(Zone().name() == "UTC");
    CHECK(zone("Etc/UTC").offset_at(utc("2026-07-01T00:00:00Z")) == 0s);
}

TEST_CASE("a name that is no zone is refused, where glibc would take it for UTC") {
    CHECK(refusal("Europe/Berln") ==
          "time zone 'Europe/Berln' is unknown (no zone file of that name in /usr/share/zoneinfo)");
    CHECK(refusal("Europe") ==
          "time zone 'Europe' is unknown (no zone file of that name in /usr/share/zoneinfo)");
    CHECK(refusal("zone.tab") ==
          "time zone 'zone.tab' is unknown (no zone file of that name in /usr/share/zoneinfo)");
    CHECK(
        refusal("../../etc/passwd") ==
        "time zone '../../etc/passwd' is not a name of the tz database (e.g. Europe/Berlin, UTC)");
    CHECK(refusal("/etc/localtime") ==
          "time zone '/etc/localtime' is not a name of the tz database (e.g. Europe/Berlin, UTC)");
    CHECK(refusal("CET-1CEST,M3.5.0,M10.5.0/3") == "time zone 'CET-1CEST,M3.5.0,M10.5.0/3' is not "
                                                   "a name of the tz database (e.g. Europe/Berlin, "
                                                   "UTC)");
    CHECK(refusal("") == "time zone '' is not a name of the tz database (e.g. Europe/Berlin, UTC)");
    CHECK(refusal("localtime") == "time zone 'localtime' is this host's own zone, which other "
                                  "hosts may not share: name it (e.g. Europe/Berlin)");
    CHECK(refusal("right/Europe/Berlin") ==
          "time zone 'right/Europe/Berlin' counts leap seconds, which civil time does not: use "
          "'Europe/Berlin'");
}

TEST_CASE("the offset at an instant comes from the tz database") {
    const Zone berlin = zone("Europe/Berlin");
    CHECK(berlin.offset_at(utc("2026-03-29T00:59:59Z")) == 1h);
    CHECK(berlin.offset_at(utc("2026-03-29T01:00:00Z")) == 2h);
    CHECK(berlin.offset_at(utc("2026-10-25T00:59:59Z")) == 2h);
    CHECK(berlin.offset_at(utc("2026-10-25T01:00:00Z")) == 1h);
    CHECK(zone("Asia/Kolkata").offset_at(utc("2026-01-01T00:00:00Z")) == 5h + 30min);
    CHECK(zone("America/New_York").offset_at(utc("2026-07-01T00:00:00Z")) == -4h);
    CHECK(berlin.local(utc("2026-03-29T01:00:00Z")) == local("2026-03-29T03:00:00Z"));
}

TEST_CASE("a civil time is one instant, none (and the jump over it), or two") {
    const Zone berlin = zone("Europe/Berlin");
    CHECK(berlin.resolve(local("2026-03-29T01:30:00Z")) ==
          LocalInstants{Kind::unique, utc("2026-03-29T00:30:00Z"), utc("2026-03-29T00:30:00Z")});
    CHECK(berlin.resolve(local("2026-03-29T02:30:00Z")) ==
          LocalInstants{Kind::skipped, utc("2026-03-29T01:00:00Z"), utc("2026-03-29T01:00:00Z")});
    CHECK(berlin.resolve(local("2026-03-29T02:00:00Z")).kind == Kind::skipped);
    CHECK(berlin.resolve(local("2026-03-29T03:00:00Z")) ==
          LocalInstants{Kind::unique, utc("2026-03-29T01:00:00Z"), utc("2026-03-29T01:00:00Z")});
    CHECK(berlin.resolve(local("2026-10-25T02:30:00Z")) ==
          LocalInstants{Kind::repeated, utc("2026-10-25T00:30:00Z"), utc("2026-10-25T01:30:00Z")});
    CHECK(berlin.resolve(local("2026-10-25T02:00:00Z")).kind == Kind::repeated);
    CHECK(berlin.resolve(local("2026-10-25T03:00:00Z")).kind == Kind::unique);
    // Lord Howe moves its clocks by 30 minutes: 02:00 to 02:30, and 02:00 back to 01:30.
    const Zone lord_howe = zone("Australia/Lord_Howe");
    CHECK(lord_howe.resolve(local("2026-10-04T02:15:00Z")) ==
          LocalInstants{Kind::skipped, utc("2026-10-03T15:30:00Z"), utc("2026-10-03T15:30:00Z")});
    CHECK(lord_howe.resolve(local("2026-04-05T01:45:00Z")) ==
          LocalInstants{Kind::repeated, utc("2026-04-04T14:45:00Z"), utc("2026-04-04T15:15:00Z")});
    CHECK(zone("Asia/Kolkata").resolve(local("2026-03-29T02:30:00Z")) ==
          LocalInstants{Kind::unique, utc("2026-03-28T21:00:00Z"), utc("2026-03-28T21:00:00Z")});
    CHECK(Zone().resolve(local("2026-03-29T02:30:00Z")).first == utc("2026-03-29T02:30:00Z"));
}

TEST_CASE("the changes of offset are those zdump lists, to the second") {
    for (const char* name :
         {"Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe",
          "Asia/Kolkata", "Antarctica/Troll", "Pacific/Chatham", "America/Santiago",
          "Africa/Casablanca", "Asia/Tehran", "America/Havana"}) {
        INFO(std::string(name));
        const Zone z = zone(name);
        std::vector<std::pair<long long, long long>> found;
        Instant at = Instant{sys_days{2026y / January / 1}};
        const Instant end = Instant{sys_days{2031y / January / 1}};
        while (auto change = z.next_change(at, end - 1s)) {
            found.emplace_back(change->time_since_epoch().count(), z.offset_at(*change).count());
            at = *change;
        }
        CHECK(found == zdump_changes(name, 2026, 2031));
        const bool keeps_one_offset = // Iran since 2022
            std::string_view(name) == "Asia/Kolkata" || std::string_view(name) == "Asia/Tehran";
        CHECK(found.empty() == keeps_one_offset);
    }
}

TEST_CASE("asking a zone leaves TZ, and glibc's local time, as they were") {
    const Zone tokyo = zone("Asia/Tokyo");
    ::setenv("TZ", ":Europe/Lisbon", 1);
    CHECK(tokyo.offset_at(utc("2040-01-01T00:00:00Z")) == 9h);
    CHECK(std::string(std::getenv("TZ")) == ":Europe/Lisbon");
    const time_t summer = utc("2040-07-01T00:00:00Z").time_since_epoch().count();
    struct tm local {};
    REQUIRE(::localtime_r(&summer, &local) != nullptr);
    CHECK(local.tm_gmtoff == 3600); // Lisbon's summer, not Tokyo
    ::unsetenv("TZ");
    CHECK(tokyo.offset_at(utc("2041-01-01T00:00:00Z")) == 9h);
    CHECK(std::getenv("TZ") == nullptr);
}
