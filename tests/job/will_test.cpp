#include <cstring>
#include <string>
#include <unistd.h>

#include <doctest/doctest.h>

#include "config/server_url.hpp"
#include "job/will.hpp"
#include "lock/keys.hpp"
#include "lock/lock.hpp"
#include "process/watchdog.hpp"

using namespace redlock;
using job::Phase;
using job::Will;
using job::WillBody;

namespace {

config::ServerConfig server(std::string_view url) {
    config::ServerConfig s;
    s.url = *config::parse_server_url(url);
    return s;
}

WillBody body() {
    WillBody b;
    b.config.key_prefix = "jobs:";
    b.config.history = 7;
    b.config.history_max_age = std::chrono::hours(2);
    b.config.servers = {server("redis://:s3cr%3At@10.0.0.1:6380/2"),
                        server("rediss://alice:pw@redis.example:6390"),
                        server("unix:///run/redis.sock?db=3"),
                        server("redis-sentinel://h1:26379,h2:26380/1#mymaster")};
    b.config.servers[1].tls.ca_file = "/etc/ca.pem";
    b.config.servers[1].tls.verify = false;
    b.config.servers[1].replicas = 2;
    b.config.servers[3].sentinel_username = "watcher";
    b.config.servers[3].sentinel_password = "sentinel-pw";
    b.name = "nightly";
    b.ttl = std::chrono::seconds(30);
    b.limit = 3;
    b.waiter = "0011223344556677";
    b.min_hold = std::chrono::seconds(5);
    b.run = "aabbccddeeff0011";
    b.host = "web-1";
    b.pid = 4242;
    b.user = "ci";
    b.command = "make 'all tests'";
    b.started = job::Clock::time_point(std::chrono::seconds(1000));
    b.started_wall = std::chrono::system_clock::time_point(std::chrono::seconds(1'800'000'000));
    b.metrics_file = "/var/lib/prom/redlock.prom";
    b.events_file = "/tmp/events.jsonl";
    return b;
}

lock::Lock a_lock(const WillBody& b, std::string token) {
    return lock::Lock(b.config.servers, lock::Keys(b.config.key_prefix, b.name), std::move(token),
                      b.ttl);
}

} // namespace

TEST_CASE("a will reads back as written: the run's server settings, lock and attempt") {
    const auto b = body();
    auto lock = a_lock(b, "00112233445566778899aabbccddeeff");
    auto will = Will::create(b, lock);
    REQUIRE(will);
    auto read = job::read_will(will->fd());
    REQUIRE(read);
    const auto& c = read->body.config;
    CHECK(c.key_prefix == "jobs:");
    CHECK(c.history == 7);
    CHECK(c.history_max_age == std::chrono::hours(2));
    REQUIRE(c.servers.size() == 4);
    CHECK(c.servers[0].url.password == "s3cr:t");
    CHECK(c.servers[0].url.port == 6380);
    CHECK(c.servers[0].url.db == 2);
    CHECK(c.servers[1].url.tls);
    CHECK(c.servers[1].url.username == "alice");
    CHECK(c.servers[1].tls.ca_file == "/etc/ca.pem");
    CHECK_FALSE(c.servers[1].tls.verify);
    CHECK(c.servers[1].replicas == 2);
    CHECK(c.servers[2].url.socket_path == "/run/redis.sock");
    CHECK(c.servers[2].url.db == 3);
    CHECK_FALSE(c.servers[2].url.password);
    CHECK(c.servers[3].url.master_name == "mymaster");
    REQUIRE(c.servers[3].url.sentinels.size() == 2);
    CHECK(c.servers[3].url.sentinels[1].port == 26380);
    CHECK(c.servers[3].sentinel_password == "sentinel-pw");
    const auto& r = read->body;
    CHECK(r.name == "nightly");
    CHECK(r.ttl == std::chrono::seconds(30));
    CHECK(r.limit == 3);
    CHECK(r.waiter == b.waiter);
    CHECK_FALSE(r.once_per);
    CHECK(r.min_hold == std::chrono::seconds(5));
    CHECK(r.run == b.run);
    CHECK(r.pid == 4242);
    CHECK(r.command == b.command);
    CHECK(r.started == b.started);
    CHECK(r.started_wall == b.started_wall);
    CHECK(r.metrics_file == b.metrics_file);
    CHECK(r.events_file == b.events_file);
    CHECK(read->state.phase == Phase::acquiring);
    CHECK(read->state.token == "00112233445566778899aabbccddeeff");
    CHECK_FALSE(read->state.acquired);
    CHECK_FALSE(read->tree); // no watchdog said anything yet
}

TEST_CASE("a will follows the run: each attempt's token, then acquired, then ended") {
    const auto b = body();
    auto lock = a_lock(b, "00112233445566778899aabbccddeeff");
    auto will = Will::create(b, lock);
    REQUIRE(will);
    auto later = a_lock(b, "ffeeddccbbaa99887766554433221100");
    later.set_limit(3);
    later.use_permit(2);
    will->attempt(later);
    auto read = job::read_will(will->fd());
    REQUIRE(read);
    CHECK(read->state.token == "ffeeddccbbaa99887766554433221100");
    CHECK(read->state.permit == 2);
    const auto at = job::Clock::time_point(std::chrono::seconds(1234));
    will->acquired(later, at);
    read = job::read_will(will->fd());
    REQUIRE(read);
    CHECK(read->state.phase == Phase::holding);
    CHECK(read->state.acquired == at);
    CHECK_FALSE(read->state.ended);
    const auto end = at + std::chrono::milliseconds(2500);
    will->ended(job::Outcome::lost, 143, end);
    read = job::read_will(will->fd());
    REQUIRE(read);
    CHECK(read->state.phase == Phase::ended);
    CHECK(read->state.outcome == job::Outcome::lost);
    CHECK(read->state.status == 143);
    CHECK(read->state.ended == end);
}

TEST_CASE("a will carries the watchdog's verdict on PROGRAM's tree") {
    const auto b = body();
    auto lock = a_lock(b, "00112233445566778899aabbccddeeff");
    auto will = Will::create(b, lock);
    REQUIRE(will);
    process::TreeReport report{};
    std::memcpy(report.magic, process::k_tree_report_magic, sizeof report.magic);
    report.proven = 0;
    std::strcpy(report.why, "its session is not empty");
    REQUIRE(::pwrite(will->fd(), &report, sizeof report, process::k_tree_report_offset) ==
            static_cast<ssize_t>(sizeof report));
    auto read = job::read_will(will->fd());
    REQUIRE(read);
    REQUIRE(read->tree);
    CHECK_FALSE(read->tree->proven);
    CHECK(read->tree->why == "its session is not empty");
}

TEST_CASE("the releaser acts on nothing but a will") {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    REQUIRE(::write(fds[1], "hello\n", 6) == 6);
    ::close(fds[1]);
    auto read = job::read_will(fds[0]);
    ::close(fds[0]);
    REQUIRE_FALSE(read);
    CHECK(read.error().kind == util::ErrorKind::usage);
    CHECK(read.error().message ==
          "__release-dead-run is redlock's own, for a watchdog's use: its input is not a will "
          "(no state)");
}
