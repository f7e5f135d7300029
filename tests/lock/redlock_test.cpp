// The Redlock algorithm over five real redis-server processes, with faults injected for
// real: foreign values, SIGSTOP (frozen), SIGKILL and restart, a password mismatch.

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "lock/lock.hpp"
#include "lock/lock_helpers.hpp"
#include "support/redis_server.hpp"
#include "util/random.hpp"

using namespace std::chrono_literals;
using redlock::lock::AcquireStatus;
using redlock::lock::Clock;
using redlock::lock::Lock;
using redlock::lock::Millis;
using redlock::lock::RenewStatus;
using redlock::lock::ServerResult;
using redlock::test::eventually;
using redlock::test::RedisServer;
using redlock::test::RedisServerOptions;
using redlock::test::renew;
using redlock::test::server_config;
using redlock::test::to_ll;
using redlock::util::ErrorKind;
using Vote = ServerResult::Vote;

namespace {

const std::string k_key = "lock:x";
const std::string k_meta = "{lock:x}:meta";
const std::string k_fence = "{lock:x}:fence";
constexpr size_t k_n = 5;

struct FiveServers {
    std::vector<std::unique_ptr<RedisServer>> servers;
    std::vector<redlock::config::ServerConfig> configs;

    explicit FiveServers(Millis command_timeout = 2s,
                         const std::vector<std::optional<std::string>>& passwords = {},
                         const std::string& url_password = {}) {
        for (size_t i = 0; i < k_n; ++i) {
            RedisServerOptions options;
            if (i < passwords.size())
                options.requirepass = passwords[i];
            servers.push_back(std::make_unique<RedisServer>(options));
            auto credentials = url_password.empty() ? "" : ":" + url_password + "@";
            configs.push_back(server_config(
                "redis://" + credentials + "127.0.0.1:" + std::to_string(servers.back()->port()),
                command_timeout, command_timeout));
        }
    }

    RedisServer& operator[](size_t i) { return *servers[i]; }
    std::string name(size_t i) const { return "127.0.0.1:" + std::to_string(servers[i]->port()); }

    Lock make_lock(Millis ttl = 30s) const {
        return Lock(configs, redlock::lock::Keys("lock:", "x"), redlock::util::random_token(), ttl);
    }
    std::string get(size_t i) const { return servers[i]->command({"GET", k_key}); }
    bool meta_exists(size_t i) const { return servers[i]->command({"EXISTS", k_meta}) == "1"; }
    // Whether no running server holds `token` (or our metadata) any more.
    bool token_nowhere(const std::string& token) const {
        for (size_t i = 0; i < k_n; ++i)
            if (servers[i]->running() && !servers[i]->frozen() &&
                (get(i) == token || meta_exists(i)))
                return false;
        return true;
    }
};

size_t count_votes(const std::vector<ServerResult>& results, Vote vote) {
    size_t n = 0;
    for (const auto& r : results)
        n += r.vote == vote ? 1 : 0;
    return n;
}

} // namespace

TEST_CASE("with five servers a lock is acquired exactly when at least three are free, and a "
          "failed attempt leaves none of our tokens behind") {
    FiveServers five;
    for (unsigned occupied = 0; occupied < (1U << k_n); ++occupied) {
        CAPTURE(occupied);
        size_t free_count = k_n - static_cast<size_t>(std::popcount(occupied));
        auto foreign = [](size_t i) { return "foreign-" + std::to_string(i); };
        for (size_t i = 0; i < k_n; ++i)
            if (occupied & (1U << i))
                REQUIRE(five[i].command({"SET", k_key, foreign(i), "PX", "60000"}) == "OK");

        auto lock = five.make_lock(60s);
        auto result = lock.acquire();
        REQUIRE_MESSAGE(result, result.error().message);
        if (free_count >= 3) {
            CHECK(result->status == AcquireStatus::acquired);
            // Our token is on a majority, all of them free servers (a straggler abandoned
            // once the majority answered may or may not have got it).
            size_t ours = 0;
            for (size_t i = 0; i < k_n; ++i) {
                CAPTURE(i);
                if (occupied & (1U << i))
                    CHECK(five.get(i) == foreign(i));
                else if (result->servers[i].vote == Vote::yes)
                    CHECK(five.get(i) == lock.token());
                ours += five.get(i) == lock.token() ? 1 : 0;
            }
            CHECK(ours >= 3);
            (void)lock.release();
        } else {
            CHECK(result->status == AcquireStatus::held);
            // A free server never claims the lock is held (an occupied one may not have
            // answered before the round was decided).
            for (size_t i = 0; i < k_n; ++i)
                if (!(occupied & (1U << i)))
                    CHECK(result->servers[i].vote != Vote::no);
        }
        // Released or never taken: none of our tokens anywhere, long before the 60 s TTL
        // could explain it, and every foreign value untouched.
        CHECK(eventually([&] { return five.token_nowhere(lock.token()); }));
        for (size_t i = 0; i < k_n; ++i) {
            CAPTURE(i);
            if (occupied & (1U << i)) {
                CHECK(five.get(i) == foreign(i));
                CHECK(to_ll(five[i].command({"PTTL", k_key})) > 30000);
            }
            REQUIRE(five[i].command({"FLUSHALL"}) == "OK");
        }
    }
}

TEST_CASE("with one server of five frozen the lock is acquired once a majority answered") {
    FiveServers five(2s);
    five[0].freeze();
    auto lock = five.make_lock(30s);
    auto result = lock.acquire();
    REQUIRE(result);
    CHECK(result->status == AcquireStatus::acquired);
    // Decided by the four that answer, not by the frozen one's 2 s command timeout.
    CHECK(result->elapsed < 1s);
    CHECK(result->servers[0].vote == Vote::failed);
    CHECK(result->servers[0].detail == "not waited for (the round was decided without it)");
    CHECK(count_votes(result->servers, Vote::yes) >= 3);
    for (size_t i = 1; i < k_n; ++i)
        if (result->servers[i].vote == Vote::yes)
            CHECK(five.get(i) == lock.token());

    // Release does not sit on the frozen server either.
    auto release_started = Clock::now();
    auto released = lock.release();
    CHECK(Clock::now() - release_started < 1s);
    CHECK(count_votes(released, Vote::yes) >= 3);
    CHECK(eventually([&] { return five.token_nowhere(lock.token()); }));

    // Thawed, the frozen server runs what was queued for it: it may now hold our token, but
    // only ours and with at most the TTL, and a release it answers clears it.
    five[0].thaw();
    auto on_thawed = five.get(0);
    CHECK((on_thawed == "(nil)" || on_thawed == lock.token()));
    CHECK(to_ll(five[0].command({"PTTL", k_key})) <= 30000);
    bool answered = eventually([&] {
        auto results = lock.release();
        return results[0].vote == Vote::yes || results[0].vote == Vote::no;
    });
    REQUIRE(answered);
    CHECK(five.get(0) == "(nil)");
    CHECK_FALSE(five.meta_exists(0));
    CHECK(five.token_nowhere(lock.token()));
}

TEST_CASE("a key a frozen server took for us expires by its ttl when no release reaches it") {
    FiveServers five(2s);
    five[0].freeze();
    auto lock = five.make_lock(1s);
    auto result = lock.acquire();
    REQUIRE(result);
    CHECK(result->status == AcquireStatus::acquired);
    five[0].thaw();
    // Whatever landed there is ours and goes away by itself within the TTL (plus slack).
    CHECK(eventually([&] { return five.get(0) == "(nil)" && !five.meta_exists(0); }, 10s));
}

TEST_CASE("with two servers of five killed the lock is still acquired") {
    FiveServers five;
    five[1].kill();
    five[3].kill();
    auto lock = five.make_lock();
    auto result = lock.acquire();
    REQUIRE(result);
    CHECK(result->status == AcquireStatus::acquired);
    CHECK(count_votes(result->servers, Vote::yes) == 3);
    CHECK(result->servers[1].vote == Vote::failed);
    CHECK(result->servers[1].detail == "Connection refused");
    CHECK(result->servers[3].detail == "Connection refused");
    for (size_t i : {0, 2, 4})
        CHECK(five.get(i) == lock.token());
    (void)lock.release();
    CHECK(eventually([&] { return five.token_nowhere(lock.token()); }));
}

TEST_CASE("with three servers of five killed acquiring is unavailable and names them") {
    FiveServers five;
    for (size_t i : {0, 2, 4})
        five[i].kill();
    auto lock = five.make_lock(60s);
    auto result = lock.acquire();
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == ErrorKind::unavailable);
    const auto& message = result.error().message;
    CHECK(message.starts_with("only "));
    CHECK(message.find(" of 5 servers answered, 3 needed (") != std::string::npos);
    for (size_t i : {0, 2, 4})
        CHECK(message.find(five.name(i) + ": Connection refused") != std::string::npos);
    // The attempt left nothing behind on the two that were up.
    CHECK(eventually([&] { return five.token_nowhere(lock.token()); }));
}

TEST_CASE("with three servers of five killed the message names exactly the failed servers") {
    FiveServers five;
    for (size_t i : {0, 2, 4})
        five[i].kill();
    auto lock = five.make_lock();
    auto result = lock.acquire();
    REQUIRE_FALSE(result);
    CHECK(result.error().message ==
          "only 2 of 5 servers answered, 3 needed (" + five.name(0) + ": Connection refused; " +
              five.name(2) + ": Connection refused; " + five.name(4) + ": Connection refused)");
}

TEST_CASE("renewal keeps the lock when one of five servers dies while it is held") {
    FiveServers five;
    auto lock = five.make_lock(30s);
    REQUIRE(lock.acquire());
    five[2].kill();
    CHECK(renew(lock) == RenewStatus::renewed);
    const auto& round = lock.last_round();
    REQUIRE(round.size() == k_n);
    CHECK(round[2].vote == Vote::failed);
    CHECK(round[2].detail == "Connection refused");
    CHECK(count_votes(round, Vote::yes) >= 3);
    five[4].kill();
    CHECK(renew(lock) == RenewStatus::renewed);
    five[0].kill();
    CHECK(renew(lock) == RenewStatus::failed);
}

TEST_CASE("renewal with one of five servers frozen is decided without waiting for it") {
    FiveServers five(2s);
    auto lock = five.make_lock(30s);
    REQUIRE(lock.acquire());
    five[1].freeze();
    auto started = Clock::now();
    CHECK(renew(lock) == RenewStatus::renewed);
    CHECK(Clock::now() - started < 1s);
    CHECK(lock.last_round()[1].vote != Vote::yes);
}

TEST_CASE("renewal fails when three of five servers are frozen") {
    FiveServers five(300ms);
    auto lock = five.make_lock(30s);
    REQUIRE(lock.acquire());
    for (size_t i : {0, 1, 2})
        five[i].freeze();
    CHECK(renew(lock) == RenewStatus::failed);
    for (size_t i : {0, 1, 2})
        CHECK(lock.last_round()[i].detail == "timed out");
}

TEST_CASE("renewal finds the lock not ours when three of five servers lost our key") {
    FiveServers five;
    auto lock = five.make_lock(30s);
    REQUIRE(lock.acquire());
    five[0].command({"DEL", k_key});
    five[1].command({"SET", k_key, "someone-else"});
    five[2].restart(); // an empty dataset
    CHECK(renew(lock) == RenewStatus::not_ours);
    CHECK(five.get(0) == "(nil)");
    CHECK(five.get(1) == "someone-else");
    CHECK(five.get(2) == "(nil)");
}

TEST_CASE("renewal finds the lock still ours when only two of five servers lost our key") {
    FiveServers five;
    auto lock = five.make_lock(30s);
    REQUIRE(lock.acquire());
    five[0].command({"DEL", k_key});
    five[1].restart();
    CHECK(renew(lock) == RenewStatus::renewed);
    CHECK(count_votes(lock.last_round(), Vote::yes) >= 3);
    CHECK(lock.last_round()[0].vote != Vote::yes);
    CHECK(lock.last_round()[1].vote != Vote::yes);
    // Renewal never re-creates a key that is gone.
    CHECK(five.get(0) == "(nil)");
    CHECK(five.get(1) == "(nil)");
}

TEST_CASE("a server killed and restarted between rounds is renewed on again") {
    FiveServers five;
    auto lock = five.make_lock(30s);
    REQUIRE(lock.acquire());
    five[3].kill();
    CHECK(renew(lock) == RenewStatus::renewed);
    CHECK(lock.last_round()[3].vote != Vote::yes);
    five[3].restart();
    // Restarted empty it would answer "not ours", which leaves the majority renewing...
    CHECK(renew(lock) == RenewStatus::renewed);
    CHECK(count_votes(lock.last_round(), Vote::yes) >= 3);
    CHECK(lock.last_round()[3].vote != Vote::yes);
    CHECK(five.get(3) == "(nil)");
    // ...and it is reached again: once it holds our token (as if it had kept it on disk),
    // a renewal extends it there too.
    REQUIRE(five[3].command({"SET", k_key, lock.token(), "PX", "3000"}) == "OK");
    CHECK(eventually(
        [&] {
            CHECK(renew(lock) == RenewStatus::renewed);
            return to_ll(five[3].command({"PTTL", k_key})) > 10000;
        },
        5s));
    (void)lock.release();
    CHECK(eventually([&] { return five.token_nowhere(lock.token()); }));
}

TEST_CASE("a server that was down at acquisition is used on a renewal once it is back") {
    FiveServers five;
    five[0].kill();
    auto lock = five.make_lock(30s);
    auto result = lock.acquire();
    REQUIRE(result);
    CHECK(result->status == AcquireStatus::acquired);
    CHECK(result->servers[0].vote == Vote::failed);
    CHECK(result->servers[0].detail == "Connection refused");
    five[0].restart();
    REQUIRE(five[0].command({"SET", k_key, lock.token(), "PX", "3000"}) == "OK");
    CHECK(eventually(
        [&] {
            CHECK(renew(lock) == RenewStatus::renewed);
            return to_ll(five[0].command({"PTTL", k_key})) > 10000;
        },
        5s));
    (void)lock.release();
    CHECK(eventually([&] { return five.token_nowhere(lock.token()); }));
}

TEST_CASE("a held lock with one of five servers down is held, not unavailable") {
    FiveServers five;
    for (size_t i = 0; i < k_n; ++i)
        REQUIRE(five[i].command({"SET", k_key, "foreign", "PX", "60000"}) == "OK");
    five[2].kill();
    for (int attempt = 0; attempt < 20; ++attempt) {
        CAPTURE(attempt);
        auto lock = five.make_lock();
        auto result = lock.acquire();
        REQUIRE_MESSAGE(result, result.error().message);
        CHECK(result->status == AcquireStatus::held);
    }
}

TEST_CASE("a password mismatch on one server of five still acquires on the other four") {
    const std::string password = "correct-horse-battery";
    FiveServers five(2s, {"a-different-one", password, password, password, password}, password);
    auto lock = five.make_lock();
    auto result = lock.acquire();
    REQUIRE(result);
    CHECK(result->status == AcquireStatus::acquired);
    // Refused, or not waited for once the other four made a majority.
    CHECK(result->servers[0].vote == Vote::failed);
    if (result->servers[0].auth_failure)
        CHECK(result->servers[0].detail.starts_with("authentication refused: WRONGPASS"));
    else
        CHECK(result->servers[0].detail == "not waited for (the round was decided without it)");
    CHECK(count_votes(result->servers, Vote::yes) >= 3);
    CHECK(five.get(0) == "(nil)");
    (void)lock.release();
}

TEST_CASE("a password mismatch on three servers of five is an auth error") {
    const std::string password = "correct-horse-battery";
    FiveServers five(2s, {"other-1", password, "other-2", password, "other-3"}, password);
    auto lock = five.make_lock();
    auto result = lock.acquire();
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == ErrorKind::auth);
    const auto& message = result.error().message;
    CHECK(message.find(password) == std::string::npos);
    CHECK(message.find("other-") == std::string::npos);
    for (size_t i : {0, 2, 4})
        CHECK(message.find(five.name(i) + ": authentication refused: WRONGPASS") !=
              std::string::npos);
    CHECK(eventually([&] { return five.get(1) == "(nil)" && five.get(3) == "(nil)"; }));
}

TEST_CASE("two locks racing for the same key over five servers never both win") {
    FiveServers five;
    for (int round = 0; round < 20; ++round) {
        CAPTURE(round);
        auto a = five.make_lock(60s);
        auto b = five.make_lock(60s);
        auto ra = a.acquire();
        auto rb = b.acquire();
        REQUIRE(ra);
        REQUIRE(rb);
        CHECK(ra->status == AcquireStatus::acquired);
        CHECK(rb->status == AcquireStatus::held);
        auto rel = a.release();
        bool gone = eventually([&] { return five.token_nowhere(a.token()); });
        if (!gone) {
            MESSAGE("acquire a: " << redlock::lock::describe_round(ra->servers));
            MESSAGE("acquire b: " << redlock::lock::describe_round(rb->servers));
            MESSAGE("release a: " << redlock::lock::describe_round(rel));
            for (size_t i = 0; i < k_n; ++i)
                MESSAGE(i << " " << five.get(i));
        }
        CHECK(gone);
        // b's requests to the servers it did not wait for may land after a's release
        // there, and after b's own cleanup: a stale copy until its TTL, never a majority.
        size_t b_copies = 0;
        for (size_t i = 0; i < k_n; ++i)
            b_copies += five.get(i) == b.token();
        CHECK(b_copies < k_n / 2 + 1);
    }
}

TEST_CASE("the leader is the same server whatever the order of the list, and differs by name") {
    std::vector<redlock::config::ServerConfig> servers;
    for (int port = 7001; port <= 7005; ++port)
        servers.push_back(server_config("redis://127.0.0.1:" + std::to_string(port)));
    std::array<size_t, k_n> led{};
    for (int n = 0; n < 200; ++n) {
        const auto key = "lock:job-" + std::to_string(n);
        Lock lock(servers, redlock::lock::Keys::of_lock_key(key), "t", 10s);
        const auto leader = servers[lock.leader()].url.display();
        ++led[lock.leader()];
        auto reversed = servers;
        std::ranges::reverse(reversed);
        Lock other(reversed, redlock::lock::Keys::of_lock_key(key), "t", 10s);
        CHECK(reversed[other.leader()].url.display() == leader);
    }
    // Spread over the servers: each leads some of 200 names (each would lead 40 on average).
    for (size_t count : led)
        CHECK(count >= 10);
}

TEST_CASE("leader first: the leader's \"held\" ends the attempt, and nothing is written") {
    FiveServers five;
    auto probe = five.make_lock();
    const size_t lead = probe.leader();
    REQUIRE(five[lead].command({"SET", k_key, "foreign", "PX", "60000"}) == "OK");

    auto lock = five.make_lock();
    auto result = lock.acquire(-1, true);
    REQUIRE_MESSAGE(result, result.error().message);
    CHECK(result->status == AcquireStatus::held);
    CHECK(result->servers[lead].vote == Vote::no);
    CHECK(result->servers[lead].held_pttl > 0);
    CHECK(count_votes(result->servers, Vote::none) == k_n - 1);
    for (size_t i = 0; i < k_n; ++i)
        if (i != lead)
            CHECK(five.get(i) == "(nil)");
    // All servers at once, the same state is a majority of free servers.
    auto again = lock.acquire();
    REQUIRE(again);
    CHECK(again->status == AcquireStatus::acquired);
    CHECK(five.get(lead) == "foreign");
}

TEST_CASE("counters that agree give the fence in one round; counters apart get a second") {
    FiveServers five;
    // Whether the fence script (round 2: it reads the counter with HGET, which an acquisition
    // never does) ran there since the last look.
    auto round2_on = [&](size_t i) {
        const bool ran =
            five[i].command({"INFO", "commandstats"}).find("cmdstat_hget:") != std::string::npos;
        five[i].command({"CONFIG", "RESETSTAT"});
        return ran;
    };
    auto counter = [&](size_t i) { return five[i].command({"HGET", k_fence, "f"}); };
    // A new name: each server starts its counter from its own clock, so they differ, and the
    // largest is written to every server that said yes.
    auto lock = five.make_lock();
    auto first = lock.acquire();
    REQUIRE(first);
    REQUIRE(first->status == AcquireStatus::acquired);
    CHECK(first->fence > 1000000000000000);
    for (size_t i = 0; i < k_n; ++i) {
        CAPTURE(i);
        const bool second_round = round2_on(i);
        if (first->servers[i].vote == Vote::yes) {
            CHECK(second_round);
            CHECK(counter(i) == std::to_string(first->fence));
        }
        five[i].command({"CONFIG", "RESETSTAT"}); // counter()'s own HGET
    }
    (void)lock.release();

    // Counters that agree: the next fence in one round.
    auto next = five.make_lock();
    auto again = next.acquire();
    REQUIRE(again);
    REQUIRE(again->status == AcquireStatus::acquired);
    CHECK(again->fence == first->fence + 1);
    for (size_t i = 0; i < k_n; ++i) {
        CAPTURE(i);
        CHECK_FALSE(round2_on(i));
    }
    (void)next.release();

    // One server ahead (say it alone saw acquisitions while the others were down): the
    // largest counter wins and is written to every server that said yes.
    const long long ahead = first->fence + 40;
    five[2].command({"HSET", k_fence, "f", std::to_string(ahead)});
    auto second = five.make_lock();
    auto result = second.acquire();
    REQUIRE(result);
    REQUIRE(result->status == AcquireStatus::acquired);
    // Server 2's yes counted in round 1 (its vote may then say it was not waited for in
    // round 2) unless it came too late: then the other four agree.
    if (result->fence != first->fence + 2) {
        CHECK(result->fence == ahead + 1);
        for (size_t i = 0; i < k_n; ++i) {
            CAPTURE(i);
            const bool second_round = round2_on(i);
            if (result->servers[i].vote == Vote::yes) {
                CHECK(counter(i) == std::to_string(ahead + 1));
                CHECK(second_round);
            }
        }
    } else {
        CHECK(result->servers[2].vote != Vote::yes);
    }
    (void)second.release();
}

TEST_CASE("leader first: a free leader, then the others, with one fence for the whole attempt") {
    FiveServers five;
    auto lock = five.make_lock();
    auto first = lock.acquire(-1, true);
    REQUIRE(first);
    REQUIRE(first->status == AcquireStatus::acquired);
    (void)lock.release();
    // A leader that is held elsewhere is no obstacle once a majority is free: here the
    // leader says yes and one other server is held.
    const size_t other = (lock.leader() + 1) % k_n;
    REQUIRE(five[other].command({"SET", k_key, "foreign", "PX", "60000"}) == "OK");
    auto lock2 = five.make_lock();
    auto second = lock2.acquire(-1, true);
    REQUIRE(second);
    CHECK(second->status == AcquireStatus::acquired);
    CHECK(second->fence > first->fence);
    CHECK(count_votes(second->servers, Vote::no) == 1);
}

TEST_CASE("leader first: a frozen leader costs a few round trips, not a timeout") {
    FiveServers five(2s);
    auto lock = five.make_lock();
    five[lock.leader()].freeze();
    const auto started = Clock::now();
    auto result = lock.acquire(-1, true);
    const auto took = Clock::now() - started;
    five[lock.leader()].thaw();
    REQUIRE_MESSAGE(result, result.error().message);
    CHECK(result->status == AcquireStatus::acquired);
    CHECK(result->servers[lock.leader()].vote == Vote::failed);
    CHECK(took < 1s); // the command timeout is 2 s; the leader's patience is 10 ms
}
