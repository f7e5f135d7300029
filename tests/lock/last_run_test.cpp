#include <doctest/doctest.h>

#include "lock/inspect.hpp"

using redlock::lock::LastRun;
using redlock::lock::tells_more;

namespace {

LastRun run(long long slot, long long started_ms, std::string host = "a", long pid = 1) {
    LastRun r;
    r.slot = slot;
    r.slot_ms = 3600000;
    r.started_ms = started_ms;
    r.who.host = std::move(host);
    r.who.pid = pid;
    r.who.acquired_at = "2026-12-06T00:00:00.000Z";
    return r;
}

} // namespace

TEST_CASE("the last run's record: a later slot, then the later run, then the one that ended") {
    CHECK(tells_more(run(2, 10), run(1, 50)));
    CHECK_FALSE(tells_more(run(1, 50), run(2, 10)));

    // One run, written to two servers whose clocks differ by a millisecond; the release,
    // decided by a majority, has not reached the second yet.
    auto ended = run(1, 100);
    ended.ended_ms = 200;
    ended.status = 3;
    const auto started_only = run(1, 101);
    CHECK(tells_more(ended, started_only));
    CHECK_FALSE(tells_more(started_only, ended));
    auto gave_back = run(1, 100);
    gave_back.start_error = "not found";
    CHECK(tells_more(gave_back, started_only));
    CHECK_FALSE(tells_more(ended, ended));

    // Another run of the same slot (the first could not start PROGRAM and gave it back):
    // the later one, ended or not.
    auto next = run(1, 150, "b", 2);
    CHECK(tells_more(next, gave_back));
    CHECK_FALSE(tells_more(gave_back, next));
}
