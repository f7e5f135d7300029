#include <atomic>
#include <chrono>
#include <filesystem>
#include <signal.h>
#include <stdexcept>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include "support/redis_server.hpp"

namespace redlock::test {
namespace {

bool process_exists(pid_t pid) {
    return ::kill(pid, 0) == 0;
}

} // namespace

TEST_CASE("the redis server fixture starts a server on a loopback port and answers commands") {
    RedisServer server;
    REQUIRE(server.running());
    CHECK(server.port() > 0);
    CHECK(server.url() == "redis://127.0.0.1:" + std::to_string(server.port()));
    CHECK(server.command({"PING"}) == "PONG");
    CHECK(server.command({"SET", "lock:a", "token with spaces", "PX", "60000"}) == "OK");
    CHECK(server.command({"GET", "lock:a"}) == "token with spaces");
    CHECK(std::stoll(server.command({"PTTL", "lock:a"})) > 0);
    CHECK(server.command({"GET", "missing"}) == "(nil)");
    CHECK(server.command({"RPUSH", "l", "x", "y"}) == "2");
    CHECK(server.command({"LRANGE", "l", "0", "-1"}) == "[x, y]");
    CHECK(server.command({"NOSUCHCOMMAND"}).starts_with("(error) ERR"));
}

TEST_CASE("the redis server fixture stops its server and removes its temp dir when destroyed") {
    pid_t pid = -1;
    std::string dir;
    {
        RedisServer server;
        pid = server.pid();
        dir = server.dir();
        REQUIRE(process_exists(pid));
        CHECK(std::filesystem::is_directory(dir));
    }
    CHECK_FALSE(process_exists(pid));
    CHECK_FALSE(std::filesystem::exists(dir));
}

TEST_CASE("the redis server fixture can listen on a unix socket in a temp dir") {
    RedisServerOptions options;
    options.use_unix_socket = true;
    RedisServer server(options);
    CHECK(server.port() == 0);
    CHECK(std::filesystem::exists(server.socket_path()));
    CHECK(server.url() == "unix://" + server.socket_path());
    CHECK(server.command({"PING"}) == "PONG");
}

TEST_CASE("a frozen server does not answer until it is thawed") {
    RedisServer server;
    REQUIRE(server.command({"SET", "k", "v"}) == "OK");
    server.freeze();
    CHECK(server.frozen());
    std::string reply;
    std::atomic<bool> done{false};
    std::thread client([&] {
        try {
            reply = server.command({"GET", "k"});
        } catch (const std::runtime_error& e) {
            reply = std::string("exception: ") + e.what();
        }
        done = true;
    });
    // The command blocks on the frozen server; thawing lets it complete.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK_FALSE(done.load());
    server.thaw();
    client.join();
    CHECK(reply == "v");
}

TEST_CASE("a killed server can be restarted on the same port and starts empty") {
    RedisServer server;
    const int port = server.port();
    REQUIRE(server.command({"SET", "k", "v"}) == "OK");
    const pid_t old_pid = server.pid();
    server.kill();
    CHECK_FALSE(server.running());
    CHECK_FALSE(process_exists(old_pid));
    CHECK_THROWS_AS(server.command({"PING"}), std::runtime_error);
    server.restart();
    CHECK(server.running());
    CHECK(server.port() == port);
    CHECK(server.pid() != old_pid);
    CHECK(server.command({"GET", "k"}) == "(nil)");
}

TEST_CASE("a server with requirepass refuses unauthenticated clients") {
    RedisServerOptions options;
    options.requirepass = "s3cret";
    RedisServer server(options);
    CHECK(server.command({"PING"}) == "PONG"); // the helper authenticates
    CHECK(server.command({"AUTH", "wrong"}).starts_with("(error) WRONGPASS"));
    CHECK(server.command({"CONFIG", "GET", "requirepass"}) == "[requirepass, s3cret]");
}

TEST_CASE("an acl user is created with its password and rules") {
    RedisServerOptions options;
    options.acl_user = AclUser{"alice", "pw", "on ~lock:* +@all"};
    RedisServer server(options);
    CHECK(server.command({"AUTH", "alice", "pw"}) == "OK");
    CHECK(server.command({"AUTH", "alice", "wrong"}).starts_with("(error) WRONGPASS"));
    // ACL DRYRUN is Redis 7's.
    const std::string allowed = server.command({"ACL", "DRYRUN", "alice", "SET", "lock:x", "1"});
    if (allowed.starts_with("(error) ERR Unknown subcommand"))
        return;
    CHECK(allowed == "OK");
    // A denial is reported as a text explaining it, not as OK.
    CHECK(server.command({"ACL", "DRYRUN", "alice", "SET", "other:x", "1"}) != "OK");
}

} // namespace redlock::test
