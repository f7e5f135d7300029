// The daemon's pure decisions (cron/daemon.hpp): jitter, windows, limits, past fires.
#include <algorithm>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cron/crontab.hpp"
#include "cron/daemon.hpp"
#include "util/timestamp.hpp"

using namespace std::chrono;
using redlock::cron::Instant;
using redlock::cron::Job;

namespace {

Instant utc(const char* iso) {
    auto t = redlock::util::parse_utc_timestamp(iso);
    REQUIRE_MESSAGE(t, iso);
    return floor<seconds>(*t);
}

Job job(const std::string& line) {
    auto crontab = redlock::cron::parse_crontab(line + "\n", "crontab");
    REQUIRE_MESSAGE(crontab, line);
    REQUIRE(crontab->jobs.size() == 1);
    return crontab->jobs.front();
}

std::vector<std::string> texts(const std::vector<Instant>& fires) {
    std::vector<std::string> out;
    for (auto f : fires)
        out.push_back(redlock::cron::slot_text(f));
    return out;
}

} // namespace

TEST_CASE("jitter is a share of the slot that every host computes alike") {
    using redlock::cron::jitter_delay;
    const Instant slot = utc("2026-03-29T01:00:00Z");
    CHECK(jitter_delay("backup", slot, 0ms) == 0ms);
    const auto d = jitter_delay("backup", slot, 30s);
    CHECK(d >= 0ms);
    CHECK(d < 30s);
    CHECK(jitter_delay("backup", slot, 30s) == d);
    // Spread: over many slots, the delays are not all alike.
    std::vector<milliseconds> seen;
    for (int i = 0; i < 20; ++i)
        seen.push_back(jitter_delay("backup", slot + hours(i), 30s));
    std::ranges::sort(seen);
    CHECK(seen.front() < 10s);
    CHECK(seen.back() > 20s);
    CHECK(jitter_delay("sync", slot, 30s) != d);
}

TEST_CASE("a job's catch-up window is its setting, an hour by default, a minute at least") {
    redlock::cron::Settings s;
    CHECK(redlock::cron::catch_up_window(s) == hours(1));
    s.catch_up = 6h;
    CHECK(redlock::cron::catch_up_window(s) == hours(6));
    s.catch_up = 0ms;
    CHECK(redlock::cron::catch_up_window(s) == minutes(1));
}

TEST_CASE("runs at once: limit=, else ten with overlap=allow, else one") {
    redlock::cron::Settings s;
    CHECK(redlock::cron::runs_at_once(s) == 1);
    s.overlap = redlock::cron::Overlap::allow;
    CHECK(redlock::cron::runs_at_once(s) == 10);
    s.limit = 3;
    CHECK(redlock::cron::runs_at_once(s) == 3);
}

TEST_CASE("the latest fires at or before an instant, oldest first") {
    using redlock::cron::fires_before;
    CHECK(texts(fires_before(job("*/15 * * * * x"), utc("2026-03-29T01:00:00Z"), 3)) ==
          std::vector<std::string>{"2026-03-29T00:30:00Z", "2026-03-29T00:45:00Z",
                                   "2026-03-29T01:00:00Z"});
    CHECK(texts(fires_before(job("*/15 * * * * x"), utc("2026-03-29T01:14:59Z"), 1)) ==
          std::vector<std::string>{"2026-03-29T01:00:00Z"});
    // Seconds: ten of them are ten seconds back.
    CHECK(fires_before(job("* * * * * * x"), utc("2026-03-29T01:00:00Z"), 10).size() == 10);
    // A yearly job, two years back at most.
    CHECK(texts(fires_before(job("@yearly x"), utc("2026-03-29T01:00:00Z"), 5)) ==
          std::vector<std::string>{"2025-01-01T00:00:00Z", "2026-01-01T00:00:00Z"});
    // In the job's zone: 02:30 in Berlin, skipped on 29 March 2026, fires when the clocks
    // jump (01:00 UTC).
    CHECK(texts(fires_before(job("CRON_TZ=Europe/Berlin\n30 2 * * * x"),
                             utc("2026-03-29T03:00:00Z"), 2)) ==
          std::vector<std::string>{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z"});
}
