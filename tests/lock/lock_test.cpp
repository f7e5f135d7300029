#include <chrono>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "lock/holder.hpp"
#include "lock/lock.hpp"
#include "lock/lock_helpers.hpp"
#include "lock/name.hpp"
#include "support/redis_server.hpp"
#include "util/random.hpp"

using namespace std::chrono_literals;
using redlock::lock::AcquireStatus;
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

namespace {

const std::string k_key = "lock:x";
const std::string k_meta = "{lock:x}:meta";
const std::string k_fence = "{lock:x}:fence";

redlock::lock::Holder test_holder(long long ttl_ms) {
    redlock::lock::Holder h;
    h.host = "test-host";
    h.pid = 1234;
    h.user = "tester";
    h.command = "sleep 10";
    h.acquired_at = "2024-01-02T03:04:05.678Z";
    h.ttl_ms = ttl_ms;
    return h;
}

struct OneServer {
    RedisServer server;
    std::vector<redlock::config::ServerConfig> servers{server_config(server.url())};

    Lock make_lock(Millis ttl = 10s, std::string token = redlock::util::random_token()) {
        auto holder = redlock::lock::holder_fields(test_holder(ttl.count()), token);
        return Lock(servers, redlock::lock::Keys("lock:", "x"), token, ttl, holder);
    }
    std::string get(const std::string& key = k_key) const { return server.command({"GET", key}); }
    long long pttl(const std::string& key = k_key) const {
        return to_ll(server.command({"PTTL", key}));
    }
    bool exists(const std::string& key) const { return server.command({"EXISTS", key}) == "1"; }
};

} // namespace

TEST_CASE("acquiring a free lock sets the key to our token with the ttl") {
    OneServer s;
    auto lock = s.make_lock(10s);
    auto before = redlock::lock::Clock::now();
    auto result = lock.acquire();
    REQUIRE(result);
    CHECK(result->status == AcquireStatus::acquired);
    CHECK(s.get() == lock.token());
    CHECK(s.pttl() > 5000);
    CHECK(s.pttl() <= 10000);
    CHECK(result->validity_end > before);
    CHECK(result->validity_end <= before + result->elapsed + 10s);
    CHECK(lock.validity_end() == result->validity_end);
    REQUIRE(result->servers.size() == 1);
    CHECK(result->servers[0].vote == ServerResult::Vote::yes);
    CHECK(result->servers[0].detail == "ok");
}

TEST_CASE("acquiring a lock writes the holder's metadata next to it with the same ttl") {
    OneServer s;
    auto lock = s.make_lock(10s);
    auto acquired = lock.acquire();
    REQUIRE(acquired);
    CHECK(s.server.command({"HGETALL", k_meta}) ==
          "[fence, " + std::to_string(acquired->fence) + ", token, " + lock.token() +
              ", host, test-host, pid, 1234, user, tester, command, sleep 10, acquired_at, "
              "2024-01-02T03:04:05.678Z, ttl_ms, 10000]");
    CHECK(s.pttl(k_meta) > 5000);
    CHECK(s.pttl(k_meta) <= 10000);
}

TEST_CASE("a second lock on the same key finds it held and leaves the first untouched") {
    OneServer s;
    auto first = s.make_lock(10s);
    REQUIRE(first.acquire());
    auto meta_before = s.server.command({"HGETALL", k_meta});

    auto second = s.make_lock(20s);
    auto result = second.acquire();
    REQUIRE(result);
    CHECK(result->status == AcquireStatus::held);
    REQUIRE(result->servers.size() == 1);
    CHECK(result->servers[0].vote == ServerResult::Vote::no);
    CHECK(result->servers[0].detail == "held");
    CHECK(s.get() == first.token());
    CHECK(s.pttl() <= 10000);
    CHECK(s.server.command({"HGETALL", k_meta}) == meta_before);
}

TEST_CASE("every attempt after the first has a fresh token, in the key and the metadata") {
    // A late request of an earlier attempt (a release finished in the background, one
    // abandoned on a frozen server) must not find, and delete, a later attempt's key.
    OneServer s;
    auto first = s.make_lock(10s);
    REQUIRE(first.acquire());
    auto second = s.make_lock(10s);
    const std::string initial = second.token();
    auto held = second.acquire();
    REQUIRE(held);
    CHECK(held->status == AcquireStatus::held);
    CHECK(second.token() == initial); // the first attempt uses the token it was given
    first.release();
    auto acquired = second.acquire();
    REQUIRE(acquired);
    REQUIRE(acquired->status == AcquireStatus::acquired);
    CHECK(second.token() != initial);
    CHECK(s.get() == second.token());
    CHECK(s.server.command({"HGET", k_meta, "token"}) == second.token());
    // An earlier attempt's token deletes nothing; renewal uses the current one.
    CHECK(s.server.command({"EVAL",
                            "if redis.call('get', KEYS[1]) == ARGV[1] then "
                            "return redis.call('del', KEYS[1]) end return 0",
                            "1", k_key, initial}) == "0");
    CHECK(second.extend(10s) == redlock::lock::RenewStatus::renewed);
}

TEST_CASE("releasing a lock deletes the key and its metadata") {
    OneServer s;
    auto lock = s.make_lock();
    REQUIRE(lock.acquire());
    auto results = lock.release();
    REQUIRE(results.size() == 1);
    CHECK(results[0].vote == ServerResult::Vote::yes);
    CHECK(results[0].detail == "released");
    CHECK_FALSE(s.exists(k_key));
    CHECK_FALSE(s.exists(k_meta));
    // The lock is free again.
    auto again = s.make_lock();
    auto result = again.acquire();
    REQUIRE(result);
    CHECK(result->status == AcquireStatus::acquired);
}

TEST_CASE("releasing with a token that is not the holder's deletes nothing") {
    OneServer s;
    auto holder = s.make_lock();
    REQUIRE(holder.acquire());
    auto impostor = s.make_lock(10s, "not-the-token");
    auto results = impostor.release();
    REQUIRE(results.size() == 1);
    CHECK(results[0].vote == ServerResult::Vote::no);
    CHECK(s.get() == holder.token());
    CHECK(s.exists(k_meta));
}

TEST_CASE("a renewal round extends the lock and its metadata") {
    OneServer s;
    auto lock = s.make_lock(10s);
    REQUIRE(lock.acquire());
    auto validity_before = lock.validity_end();
    // Stand in for time passing: the lease is nearly over.
    REQUIRE(s.server.command({"PEXPIRE", k_key, "1000"}) == "1");
    REQUIRE(s.server.command({"PEXPIRE", k_meta, "1000"}) == "1");
    CHECK(renew(lock) == RenewStatus::renewed);
    CHECK_FALSE(lock.renewal_in_flight());
    CHECK(s.pttl() > 5000);
    CHECK(s.pttl(k_meta) > 5000);
    CHECK(s.get() == lock.token());
    CHECK(lock.validity_end() >= validity_before);
    REQUIRE(lock.last_round().size() == 1);
    CHECK(lock.last_round()[0].vote == ServerResult::Vote::yes);
}

TEST_CASE("a renewal finds the lock not ours once its key was deleted") {
    OneServer s;
    auto lock = s.make_lock();
    REQUIRE(lock.acquire());
    REQUIRE(s.server.command({"DEL", k_key}) == "1");
    CHECK(renew(lock) == RenewStatus::not_ours);
    CHECK_FALSE(s.exists(k_key)); // never re-created
}

TEST_CASE("a renewal finds the lock not ours once another owner took the key") {
    OneServer s;
    auto lock = s.make_lock();
    REQUIRE(lock.acquire());
    REQUIRE(s.server.command({"SET", k_key, "someone-else", "PX", "60000"}) == "OK");
    CHECK(renew(lock) == RenewStatus::not_ours);
    CHECK(s.get() == "someone-else");
    CHECK(s.pttl() > 50000);
}

TEST_CASE("a renewal against a stopped server fails") {
    OneServer s;
    auto lock = s.make_lock();
    REQUIRE(lock.acquire());
    s.server.kill();
    CHECK(renew(lock) == RenewStatus::failed);
    REQUIRE(lock.last_round().size() == 1);
    CHECK(lock.last_round()[0].vote == ServerResult::Vote::failed);
    CHECK(lock.last_round()[0].detail == "Connection refused");
}

TEST_CASE("extending a held lock sets its new ttl") {
    OneServer s;
    auto lock = s.make_lock(5s);
    REQUIRE(lock.acquire());
    CHECK(lock.extend(60s) == RenewStatus::renewed);
    CHECK(lock.ttl() == 60s);
    CHECK(s.pttl() > 30000);
    CHECK(s.pttl(k_meta) > 30000);
    CHECK(s.get() == lock.token());
}

TEST_CASE("extending a lock whose key is gone is not ours and creates nothing") {
    OneServer s;
    auto lock = s.make_lock(5s);
    REQUIRE(lock.acquire());
    REQUIRE(s.server.command({"DEL", k_key}) == "1");
    CHECK(lock.extend(60s) == RenewStatus::not_ours);
    CHECK_FALSE(s.exists(k_key));
}

TEST_CASE("a foreign SET NX value blocks acquisition and is never deleted") {
    OneServer s;
    REQUIRE(s.server.command({"SET", k_key, "foreign", "NX", "PX", "60000"}) == "OK");
    auto lock = s.make_lock();
    auto result = lock.acquire();
    REQUIRE(result);
    CHECK(result->status == AcquireStatus::held);
    (void)lock.release();
    CHECK(lock.extend(10s) == RenewStatus::not_ours);
    CHECK(s.get() == "foreign");
    CHECK(s.pttl() > 50000);
    CHECK_FALSE(s.exists(k_meta));
}

TEST_CASE("acquiring after a SCRIPT FLUSH works through the EVAL fallback") {
    OneServer s;
    REQUIRE(s.server.command({"SCRIPT", "FLUSH"}) == "OK");
    auto lock = s.make_lock();
    auto result = lock.acquire();
    REQUIRE(result);
    CHECK(result->status == AcquireStatus::acquired);
    REQUIRE(s.server.command({"SCRIPT", "FLUSH"}) == "OK");
    CHECK(renew(lock) == RenewStatus::renewed);
    REQUIRE(s.server.command({"SCRIPT", "FLUSH"}) == "OK");
    (void)lock.release();
    CHECK_FALSE(s.exists(k_key));
}

TEST_CASE("acquiring on a server that is down is unavailable and names the server") {
    OneServer s;
    s.server.kill();
    auto lock = s.make_lock();
    auto result = lock.acquire();
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == ErrorKind::unavailable);
    CHECK(result.error().message ==
          "127.0.0.1:" + std::to_string(s.server.port()) + ": Connection refused");
}

TEST_CASE("acquiring with a wrong password is an auth error that never shows the password") {
    RedisServerOptions options;
    options.requirepass = "the-real-one";
    RedisServer server(options);
    std::vector servers{
        server_config("redis://:a-wrong-one@127.0.0.1:" + std::to_string(server.port()))};
    Lock lock(servers, redlock::lock::Keys("lock:", "x"), redlock::util::random_token(), 10s);
    auto result = lock.acquire();
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == ErrorKind::auth);
    // The server's own words: "WRONGPASS invalid username-password pair or user is
    // disabled." (Redis 6.0: up to "pair").
    const std::string said = server.command({"AUTH", "a-wrong-one"});
    REQUIRE(said.starts_with("(error) WRONGPASS invalid username-password pair"));
    CHECK(result.error().message == "127.0.0.1:" + std::to_string(server.port()) +
                                        ": authentication refused: " + said.substr(8));
    CHECK(result.error().message.find("a-wrong-one") == std::string::npos);
    CHECK(server.command({"EXISTS", k_key}) == "0");
}

TEST_CASE("a refused password where the default user needs none leaves no lock behind") {
    // Redis runs the script pipelined behind the refused AUTH as the default user: the
    // attempt wrote, and is released (again as the default user) like any failed attempt.
    RedisServerOptions options;
    options.acl_user = redlock::test::AclUser{"app", "app-pass", "on ~* &* +@all"};
    RedisServer server(options);
    const auto port = std::to_string(server.port());
    // The server's own words (Redis 6.0 ends after "pair").
    const std::string said = server.command({"AUTH", "app", "not-the-pass"});
    REQUIRE(said.starts_with("(error) WRONGPASS invalid username-password pair"));
    for (const std::string credentials : {"app:not-the-pass", "nosuch:app-pass"}) {
        CAPTURE(credentials);
        std::vector servers{server_config("redis://" + credentials + "@127.0.0.1:" + port)};
        Lock lock(servers, redlock::lock::Keys("lock:", "x"), redlock::util::random_token(), 10s);
        auto result = lock.acquire();
        REQUIRE_FALSE(result);
        CHECK(result.error().kind == ErrorKind::auth);
        CHECK(result.error().message ==
              "127.0.0.1:" + port + ": authentication refused: " + said.substr(8));
        CHECK(server.command({"EXISTS", k_key}) == "0");
        CHECK(server.command({"EXISTS", k_meta}) == "0");
        // The release ran: nothing to say about it.
        REQUIRE(lock.last_cleanup().size() == 1);
        CHECK(lock.last_cleanup()[0].ran_anyway);
    }
}

TEST_CASE("acquiring without the password a server requires is an auth error") {
    RedisServerOptions options;
    options.requirepass = "pw";
    RedisServer server(options);
    std::vector servers{server_config(server.url())};
    Lock lock(servers, redlock::lock::Keys("lock:", "x"), redlock::util::random_token(), 10s);
    auto result = lock.acquire();
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == ErrorKind::auth);
    // The server's own words after ours: NOAUTH, or (Redis 7, to a command of more than 10
    // arguments, as an acquisition is) a protocol error.
    const std::string said = "127.0.0.1:" + std::to_string(server.port()) +
                             ": the server requires a password and none was given (";
    CHECK(result.error().message.starts_with(said));
    const std::string cause = result.error().message.substr(said.size());
    CHECK((cause == "NOAUTH Authentication required.)" ||
           cause == "ERR Protocol error: unauthenticated multibulk length)"));
}

namespace {

// Whether `message` is redlock's word on the server at `port` refusing a key by its ACL,
// in the server's own words: "NOPERM this user has no permissions to access one of the
// keys used as arguments" (Redis 8, Valkey 8: "NOPERM No permissions to access a key").
bool is_key_refusal(const std::string& message, int port) {
    const std::string prefix =
        "127.0.0.1:" + std::to_string(port) + ": permission denied by the server's ACL: ";
    return message == prefix + "NOPERM this user has no permissions to access one of the keys "
                               "used as arguments" ||
           message == prefix + "NOPERM No permissions to access a key";
}

} // namespace

TEST_CASE("an ACL user without access to the lock key is refused with an auth error") {
    RedisServerOptions options;
    options.acl_user = redlock::test::AclUser{"app", "app-pass", "on ~other:* &* +@all"};
    RedisServer server(options);
    std::vector servers{
        server_config("redis://app:app-pass@127.0.0.1:" + std::to_string(server.port()))};
    Lock lock(servers, redlock::lock::Keys("lock:", "x"), redlock::util::random_token(), 10s);
    auto result = lock.acquire();
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == ErrorKind::auth);
    CHECK(is_key_refusal(result.error().message, server.port()));
    // Refused before the script ran: there was nothing to release.
    CHECK(lock.last_cleanup().empty());
}

TEST_CASE("an ACL refusal of a user that needs no password is not taken for a missing one") {
    RedisServerOptions options;
    options.extra_args = {"--user", "default", "on", "nopass", "resetkeys", "~other:*", "+@all"};
    RedisServer server(options);
    std::vector servers{server_config(server.url())};
    Lock lock(servers, redlock::lock::Keys("lock:", "x"), redlock::util::random_token(), 10s);
    auto result = lock.acquire();
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == ErrorKind::auth);
    CHECK(is_key_refusal(result.error().message, server.port()));
    CHECK(lock.last_cleanup().empty());
}

TEST_CASE("a lock in another database does not see the lock in database 0") {
    OneServer s;
    auto in_db0 = s.make_lock();
    REQUIRE(in_db0.acquire());
    std::vector servers{server_config(s.server.url() + "/5")};
    Lock in_db5(servers, redlock::lock::Keys("lock:", "x"), redlock::util::random_token(), 10s);
    auto result = in_db5.acquire();
    REQUIRE(result);
    CHECK(result->status == AcquireStatus::acquired);
    CHECK(s.get() == in_db0.token());
}

TEST_CASE("a lock that is never released expires by its ttl") {
    OneServer s;
    auto lock = s.make_lock(300ms);
    REQUIRE(lock.acquire());
    CHECK(eventually([&] { return !s.exists(k_key) && !s.exists(k_meta); }, 10s));
}
