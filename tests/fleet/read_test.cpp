#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "fleet/read.hpp"
#include "lock/keys.hpp"
#include "lock/lock_helpers.hpp"
#include "support/fake_server.hpp"
#include "support/redis_server.hpp"

using redlock::fleet::Counters;
using redlock::fleet::LockReader;
using redlock::fleet::parse_counters;
using redlock::lock::LockState;
using redlock::test::FakeServer;
using redlock::test::RedisServer;

namespace {

redlock::config::Config config_of(const std::vector<const RedisServer*>& servers) {
    redlock::config::Config config;
    for (const auto* s : servers)
        config.servers.push_back(redlock::test::server_config(s->url()));
    return config;
}

} // namespace

TEST_CASE("the counters hash is read field by field, unknown fields skipped") {
    const auto c = parse_counters({{"runs:ran", "3"},
                                   {"runs:skipped-held", "2"},
                                   {"last_success_ms", "1700000000000"},
                                   {"last_run_ms", "1700000001000"},
                                   {"slot_ms", "3600000"},
                                   {"d:1", "1"},
                                   {"d:3600", "2"},
                                   {"d:+Inf", "4"},
                                   {"d:7", "9"},
                                   {"duration_ms", "12345"},
                                   {"runs:ran-away", "x"},
                                   {"other", "1"}});
    CHECK(c.runs == std::map<std::string, long long>{{"ran", 3}, {"skipped-held", 2}});
    CHECK(c.last_success_ms == 1700000000000);
    CHECK(c.last_run_ms == 1700000001000);
    CHECK(c.slot_ms == 3600000);
    CHECK(c.durations.front() == 1);
    CHECK(c.durations[9] == 2); // 3600 s
    CHECK(c.durations.back() == 4);
    CHECK(c.duration_sum_ms == 12345);
}

TEST_CASE("counts and times past belief in the counters hash are unknown") {
    const std::string big = "9223372036854775807";
    const auto c = parse_counters({{"runs:ran", "3"},
                                   {"runs:lost", "9007199254740993"}, // 2^53 + 1
                                   {"runs:failed", "-5"},
                                   {"d:1", big},
                                   {"d:10", "2"},
                                   {"duration_ms", big},
                                   {"last_success_ms", big},
                                   {"last_run_ms", "-1"},
                                   {"slot_ms", big}});
    CHECK(c.runs == std::map<std::string, long long>{{"ran", 3}});
    CHECK(c.durations.front() == 0);
    CHECK(c.durations[2] == 2);
    CHECK_FALSE(c.duration_sum_ms);
    CHECK_FALSE(c.last_success_ms);
    CHECK_FALSE(c.last_run_ms);
    CHECK_FALSE(c.slot_ms);
}

TEST_CASE("a server's absurd counts of waiters are bounded, not added past 2^63") {
    // The read script's reply (fleet/read_script.hpp) from a server that is not Redis: a
    // held lock with 2^63-1 waiters listed, in the queue and listening.
    FakeServer server([](const FakeServer::Peer& peer) {
        const std::string big = ":9223372036854775807\r\n";
        (void)peer.send("$40\r\n" + std::string(40, 'a') + "\r\n" + "*13\r\n$6\r\nstring\r\n" +
                        "$3\r\ntok\r\n:30000\r\n$0\r\n\r\n$-1\r\n$0\r\n\r\n" + big + big + big +
                        "$0\r\n\r\n$0\r\n\r\n$-1\r\n*0\r\n");
    });
    redlock::config::Config config;
    config.servers.push_back(redlock::test::server_config(server.url()));
    LockReader reader(config);
    const std::vector<std::string> names{"job"};
    const auto reading = reader.read(names);
    REQUIRE(reading.locks.size() == 1);
    CHECK(reading.errors == std::vector<std::string>{""});
    CHECK(reading.locks[0].view.state == LockState::held);
    CHECK(reading.locks[0].waiters == 0);
    CHECK(reading.locks[0].queue == 0);
}

TEST_CASE("counters of several servers combine as the largest of each") {
    Counters a = parse_counters({{"runs:ran", "5"}, {"runs:lost", "1"}, {"last_success_ms", "10"}});
    const Counters b =
        parse_counters({{"runs:ran", "4"}, {"runs:gave-up", "2"}, {"last_success_ms", "20"}});
    a.merge(b);
    CHECK(a.runs == std::map<std::string, long long>{{"ran", 5}, {"lost", 1}, {"gave-up", 2}});
    CHECK(a.last_success_ms == 20);
}

TEST_CASE("a reading tells holder, waiters, counters and the newest run of each name") {
    RedisServer server;
    const auto config = config_of({&server});
    const redlock::lock::Keys k("lock:", "job");
    server.command({"SET", k.lock, "tok", "PX", "30000"});
    server.command({"HSET", k.meta, "token", "tok", "host", "h1", "pid", "42", "user", "u",
                    "command", "c", "acquired_at", "2024-01-01T00:00:00.000Z", "fence", "7"});
    server.command({"ZADD", k.waiters, "1", "w1", "2", "w2"});
    // The record: the fence, the counters of the runs before the newest, and the newest
    // (its values in lock/scripts.hpp's k_entry_fields order): a reading counts it too.
    using namespace std::string_literals;
    server.command({"HSET", k.record, "f", "7", "r:ran", "2", "ls", "99", "e",
                    "r1\0"s
                    "5\0"s
                    "0\0"s
                    "0\0"s
                    "ran\0"s
                    "1\0"s
                    "\0"s
                    "\0"s
                    "h0"});
    // A name with a key of another type, one with nothing at all, and a semaphore.
    server.command({"HSET", "lock:odd", "a", "b"});
    const redlock::lock::Keys s("lock:", "sem");
    server.command({"ZADD", s.lock, "99999999999999", "p1", "99999999999999", "p2", "1", "old"});
    server.command({"SET", s.limit, "3"});

    LockReader reader(config);
    const std::vector<std::string> names{"job", "odd", "none", "sem"};
    const auto reading = reader.read(names);
    REQUIRE(reading.locks.size() == 4);
    CHECK(reading.errors == std::vector<std::string>{""});
    const auto& job = reading.locks[0];
    CHECK(job.view.state == LockState::held);
    REQUIRE(job.view.holder);
    CHECK(job.view.holder->host == "h1");
    CHECK(job.view.fence == 7);
    CHECK(job.waiters == 2);
    CHECK(job.counters.runs.at("ran") == 3);
    CHECK(job.counters.last_success_ms == 99);
    CHECK(job.counters.last_run_ms == 5);
    CHECK(job.counters.durations[0] == 1);
    REQUIRE(job.latest);
    CHECK(job.latest->host == "h0");
    CHECK(job.latest->exit_status == 1);
    CHECK_FALSE(job.gone());

    CHECK(reading.locks[1].view.state == LockState::held);
    CHECK(reading.locks[1].view.wrong_type);
    CHECK(reading.locks[2].view.state == LockState::free);
    CHECK(reading.locks[2].gone());
    const auto& sem = reading.locks[3];
    CHECK(sem.view.limit == 3);
    CHECK(sem.view.permits_held == 2);
    CHECK(sem.view.state == LockState::held);
}

TEST_CASE("a foreign value of megabytes is clipped, not a reply that fails the pipeline") {
    RedisServer server;
    const auto config = config_of({&server});
    const redlock::lock::Keys k("lock:", "big");
    server.command({"SET", k.lock, "tok", "PX", "30000"});
    server.command({"HSET", k.meta, "token", "tok", "host", std::string(5 << 20, 'h')});
    LockReader reader(config);
    const std::vector<std::string> names{"big", "other"};
    const auto reading = reader.read(names);
    REQUIRE(reading.locks.size() == 2);
    CHECK(reading.errors == std::vector<std::string>{""});
    CHECK(reading.locks[0].view.state == LockState::held);
    REQUIRE(reading.locks[0].view.holder);
    CHECK(reading.locks[0].view.holder->host.size() == 1024);
}

TEST_CASE("a reading of three servers with one frozen is the other two's, not waiting for it") {
    RedisServer a, b, c;
    // A reading that waited for the frozen server would wait a minute for each.
    redlock::config::Config config;
    for (const auto* s : {&a, &b, &c})
        config.servers.push_back(redlock::test::server_config(s->url(), std::chrono::minutes(1)));
    for (auto* s : {&a, &b})
        s->command({"SET", "lock:job", "tok", "PX", "30000"});
    c.freeze();
    LockReader reader(config);
    const std::vector<std::string> names{"job"};
    for (int i = 0; i < 3; ++i) {
        const auto reading = reader.read(names);
        CHECK(reading.locks[0].view.state == LockState::held);
        CHECK(reading.errors[0].empty());
        CHECK(reading.errors[2] == "no answer in time");
    }
    c.thaw();
}
