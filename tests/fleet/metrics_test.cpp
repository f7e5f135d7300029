#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "fleet/fleet.hpp"
#include "fleet/metrics.hpp"
#include "lock/lock_helpers.hpp"
#include "support/redis_server.hpp"

using redlock::fleet::Fleet;
using redlock::fleet::MetricsWriter;
using redlock::fleet::render_metrics;
using redlock::test::RedisServer;

namespace {

const redlock::util::UtcMillis k_now{std::chrono::milliseconds(1'800'000'000'000)};

// Five names with counters in their record (a run each) on `server`, followed by an exporter's
// model.
struct Five {
    RedisServer server;
    redlock::config::Config config;
    std::unique_ptr<Fleet> fleet;

    Five() {
        config.servers.push_back(redlock::test::server_config(server.url()));
        for (const char* name : {"a", "b", "c", "d", "e"})
            server.command({"HSET", "{lock:" + std::string(name) + "}:fence", "r:ran", "1", "d5",
                            "1", "ds", "2000", "lr", "1700000000000"});
        fleet = std::make_unique<Fleet>(config, Fleet::Options{.keep_free = true});
        REQUIRE(fleet->start(-1));
        REQUIRE(fleet->locks().size() == 5);
    }
};

} // namespace

TEST_CASE("metrics written a piece at a time are the metrics written whole") {
    Five five;
    const std::string whole = render_metrics(*five.fleet, k_now);
    CHECK(whole.find("redlock_runs_total{name=\"c\",outcome=\"ran\"} 1\n") != std::string::npos);
    MetricsWriter writer(*five.fleet, k_now);
    std::string pieces;
    size_t calls = 1;
    while (writer.next(pieces, pieces.size() + 1))
        ++calls;
    CHECK(pieces == whole);
    CHECK(calls >= 5 * 6); // a name's samples of one family a call: six families each
}

TEST_CASE("a name gone between two pieces of the metrics is passed over, the rest written once") {
    Five five;
    MetricsWriter writer(*five.fleet, k_now);
    std::string out;
    REQUIRE(writer.next(out, 1)); // the servers, and the first name's redlock_held
    CHECK(out.ends_with("redlock_held{name=\"a\"} 0\n"));
    // "c" goes: its counters expire, and the model reads every lock again.
    five.server.command({"DEL", "{lock:c}:fence"});
    REQUIRE(five.fleet->start(-1));
    REQUIRE(five.fleet->locks().size() == 4);
    while (writer.next(out, std::string::npos)) {
    }
    CHECK(out.find("name=\"c\"") == std::string::npos);
    CHECK(out == render_metrics(*five.fleet, k_now));
}
