#include <array>
#include <chrono>
#include <string>
#include <string_view>
#include <sys/resource.h>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <hiredis/hiredis.h>

#include "config/server_url.hpp"
#include "lock/scripts.hpp"
#include "redis/connection.hpp"
#include "redis/fanout.hpp"
#include "support/fake_server.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using redlock::config::ServerConfig;
using redlock::redis::Clock;
using redlock::redis::Connection;
using redlock::redis::FailureKind;
using redlock::redis::Outcome;
using redlock::test::AclUser;
using redlock::test::FakeServer;
using redlock::test::RedisServer;
using redlock::test::RedisServerOptions;

namespace {

ServerConfig server_config(const std::string& url, std::chrono::milliseconds command_timeout = 5s,
                           std::chrono::milliseconds connect_timeout = 5s) {
    auto parsed = redlock::config::parse_server_url(url);
    REQUIRE_MESSAGE(parsed, url);
    return ServerConfig{*parsed, connect_timeout, command_timeout, {}, {}, 0, {}, {}};
}

std::string encode(std::vector<std::string_view> argv) {
    return redlock::redis::encode_command(argv);
}

// Runs one request to completion (a reply or a failure) and returns its outcome.
const Outcome& request(Connection& conn, const std::string& command,
                       const std::string& fallback = {}) {
    conn.start(command, fallback, Clock::now());
    (void)redlock::redis::wait(std::span<Connection>(&conn, 1), [] { return false; });
    REQUIRE_FALSE(conn.busy());
    REQUIRE(conn.outcome());
    return *conn.outcome();
}

// The reply of a request that must have got one, rendered as redis::describe does.
std::string reply_of(Connection& conn, std::vector<std::string_view> argv) {
    const auto& outcome = request(conn, encode(std::move(argv)));
    REQUIRE_MESSAGE(!outcome.failure, outcome.failure->detail);
    REQUIRE(outcome.reply);
    return redlock::redis::describe(*outcome.reply);
}

std::string port_url(const RedisServer& server, const std::string& credentials = {}) {
    return "redis://" + credentials + "127.0.0.1:" + std::to_string(server.port());
}

} // namespace

TEST_CASE("commands are encoded byte for byte as hiredis encodes them") {
    const std::string big(100'000, 'x');
    const std::vector<std::vector<std::string_view>> cases = {
        {"PING"},
        {"SET", "k", "", "PX", "30000"},
        {"EVAL", std::string_view("a\0b\r\n", 5), "1", big},
    };
    for (const auto& argv : cases) {
        std::vector<const char*> words;
        std::vector<size_t> lengths;
        for (auto w : argv) {
            words.push_back(w.data());
            lengths.push_back(w.size());
        }
        char* expected = nullptr;
        long long n = redisFormatCommandArgv(&expected, static_cast<int>(words.size()),
                                             words.data(), lengths.data());
        REQUIRE(n > 0);
        CHECK(encode(argv) == std::string(expected, static_cast<size_t>(n)));
        redisFreeCommand(expected);
    }
}

TEST_CASE("a connection sends a request and reads its reply") {
    RedisServer server;
    Connection conn(server_config(server.url()));
    CHECK(conn.name() == "127.0.0.1:" + std::to_string(server.port()));
    CHECK(reply_of(conn, {"PING"}) == "PONG");
    CHECK(reply_of(conn, {"SET", "k", "a value\r\nwith CRLF"}) == "OK");
    CHECK(reply_of(conn, {"GET", "k"}) == "a value\r\nwith CRLF");
    CHECK(reply_of(conn, {"GET", "missing"}) == "(nil)");
    CHECK(reply_of(conn, {"INCR", "n"}) == "(integer) 1");
    CHECK(reply_of(conn, {"NOSUCHCOMMAND"}).starts_with("ERR unknown command"));
    CHECK(server.command({"GET", "k"}) == "a value\r\nwith CRLF");
}

TEST_CASE("a connection keeps its socket open between requests") {
    RedisServer server;
    Connection conn(server_config(server.url()));
    auto first = reply_of(conn, {"CLIENT", "ID"});
    auto second = reply_of(conn, {"CLIENT", "ID"});
    CHECK(first == second);
}

TEST_CASE("a connection authenticates with the password of the default user") {
    RedisServerOptions options;
    options.requirepass = "s3cret pass";
    RedisServer server(options);
    Connection conn(server_config(port_url(server, ":s3cret%20pass@")));
    CHECK(reply_of(conn, {"SET", "k", "v"}) == "OK");
    CHECK(server.command({"GET", "k"}) == "v");
}

TEST_CASE("a connection authenticates as an ACL user") {
    RedisServerOptions options;
    options.acl_user = AclUser{"app", "app-pass", "on ~* &* +@all"};
    RedisServer server(options);
    Connection conn(server_config(port_url(server, "app:app-pass@")));
    CHECK(reply_of(conn, {"ACL", "WHOAMI"}) == "app");
}

TEST_CASE("a wrong password is an auth failure whose detail never shows the password") {
    RedisServerOptions options;
    options.requirepass = "right-password";
    RedisServer server(options);
    Connection conn(server_config(port_url(server, ":wrong-password@")));
    const auto& outcome = request(conn, encode({"PING"}));
    REQUIRE(outcome.failure);
    CHECK(outcome.failure->kind == FailureKind::auth);
    CHECK(outcome.failure->detail.starts_with("authentication refused: WRONGPASS"));
    CHECK(outcome.failure->detail.find("wrong-password") == std::string::npos);
    CHECK(outcome.failure->detail.find("right-password") == std::string::npos);
}

TEST_CASE("a wrong password of an ACL user is an auth failure") {
    RedisServerOptions options;
    options.acl_user = AclUser{"app", "app-pass", "on ~* &* +@all"};
    RedisServer server(options);
    Connection conn(server_config(port_url(server, "app:not-the-pass@")));
    const auto& outcome = request(conn, encode({"PING"}));
    REQUIRE(outcome.failure);
    CHECK(outcome.failure->kind == FailureKind::auth);
    CHECK(outcome.failure->detail.find("not-the-pass") == std::string::npos);
}

TEST_CASE("a request behind a refused AUTH is run by the server all the same, and says so") {
    // The default user needs no password: the request runs as the default user.
    RedisServerOptions options;
    options.acl_user = AclUser{"app", "app-pass", "on ~* &* +@all"};
    RedisServer server(options);
    Connection conn(server_config(port_url(server, "app:not-the-pass@")));
    const auto& ran = request(conn, encode({"SET", "k", "v"}));
    REQUIRE(ran.failure);
    CHECK(ran.failure->kind == FailureKind::auth);
    CHECK(ran.failure->detail.starts_with("authentication refused: WRONGPASS"));
    CHECK(ran.written);
    REQUIRE(ran.reply);
    CHECK(redlock::redis::describe(*ran.reply) == "OK");
    CHECK(server.command({"GET", "k"}) == "v");
    CHECK(conn.fd() < 0);
}

TEST_CASE("a request behind a refused AUTH that the server refused too did not run") {
    RedisServerOptions options;
    options.requirepass = "right";
    RedisServer server(options);
    Connection conn(server_config(port_url(server, ":wrong@")));
    const auto& refused = request(conn, encode({"SET", "k", "v"}));
    REQUIRE(refused.failure);
    CHECK(refused.failure->kind == FailureKind::auth);
    CHECK(refused.failure->detail.starts_with("authentication refused: WRONGPASS"));
    CHECK_FALSE(refused.written);
    REQUIRE(refused.reply);
    CHECK(redlock::redis::text(*refused.reply).starts_with("NOAUTH"));
    CHECK(server.command({"EXISTS", "k"}) == "0");
}

TEST_CASE("a request without the password a server requires gets a NOAUTH error reply") {
    RedisServerOptions options;
    options.requirepass = "pw";
    RedisServer server(options);
    Connection conn(server_config(server.url()));
    const auto& outcome = request(conn, encode({"GET", "k"}));
    REQUIRE(outcome.reply);
    CHECK(redlock::redis::is_auth_error(*outcome.reply));
    CHECK(redlock::redis::text(*outcome.reply).starts_with("NOAUTH"));
}

TEST_CASE("a connection selects the database named in the url") {
    RedisServer server;
    Connection conn(server_config(port_url(server) + "/3"));
    CHECK(reply_of(conn, {"SET", "in-db-3", "v"}) == "OK");
    CHECK(server.command({"EXISTS", "in-db-3"}) == "0");
    CHECK(server.command({"INFO", "keyspace"}).find("db3:keys=1,") != std::string::npos);
}

TEST_CASE("a database the server does not have is a setup failure") {
    RedisServer server;
    Connection conn(server_config(port_url(server) + "/99"));
    const auto& outcome = request(conn, encode({"PING"}));
    REQUIRE(outcome.failure);
    CHECK(outcome.failure->kind == FailureKind::setup);
    CHECK(outcome.failure->detail == "ERR DB index is out of range");
}

TEST_CASE("a connection speaks over a unix socket") {
    RedisServerOptions options;
    options.use_unix_socket = true;
    RedisServer server(options);
    Connection conn(server_config(server.url()));
    CHECK(conn.name() == "unix:" + server.socket_path());
    CHECK(reply_of(conn, {"SET", "k", "over unix"}) == "OK");
    CHECK(server.command({"GET", "k"}) == "over unix");
}

TEST_CASE("a unix socket with a db selects that database") {
    RedisServerOptions options;
    options.use_unix_socket = true;
    RedisServer server(options);
    Connection conn(server_config(server.url() + "?db=2"));
    CHECK(reply_of(conn, {"SET", "k", "v"}) == "OK");
    CHECK(server.command({"INFO", "keyspace"}).find("db2:keys=1,") != std::string::npos);
}

TEST_CASE("a refused connection is a connect failure") {
    RedisServer server;
    auto url = server.url();
    server.kill();
    Connection conn(server_config(url));
    const auto& outcome = request(conn, encode({"PING"}));
    REQUIRE(outcome.failure);
    CHECK(outcome.failure->kind == FailureKind::connect);
    CHECK(outcome.failure->detail == "Connection refused");
}

TEST_CASE("a missing unix socket is a connect failure") {
    RedisServerOptions options;
    options.use_unix_socket = true;
    RedisServer server(options);
    auto url = server.url();
    server.kill();
    ::unlink(server.socket_path().c_str());
    Connection conn(server_config(url));
    const auto& outcome = request(conn, encode({"PING"}));
    REQUIRE(outcome.failure);
    CHECK(outcome.failure->kind == FailureKind::connect);
    CHECK(outcome.failure->detail == "No such file or directory");
}

TEST_CASE("a frozen server is a timeout failure") {
    RedisServer server;
    Connection conn(server_config(server.url(), 200ms, 200ms));
    CHECK(reply_of(conn, {"PING"}) == "PONG");
    server.freeze();
    const auto& outcome = request(conn, encode({"PING"}));
    REQUIRE(outcome.failure);
    CHECK(outcome.failure->kind == FailureKind::timeout);
    CHECK(outcome.failure->detail == "timed out");
    CHECK(outcome.latency >= 200ms);
    server.thaw();
    // The timed-out connection was dropped; the next request starts afresh.
    CHECK(reply_of(conn, {"PING"}) == "PONG");
}

TEST_CASE("a server frozen before the first request is a timeout failure too") {
    RedisServer server;
    server.freeze();
    Connection conn(server_config(server.url(), 200ms, 200ms));
    const auto& outcome = request(conn, encode({"PING"}));
    REQUIRE(outcome.failure);
    CHECK(outcome.failure->kind == FailureKind::timeout);
}

TEST_CASE("a connection reconnects after the server restarted between two requests") {
    RedisServer server;
    Connection conn(server_config(server.url()));
    CHECK(reply_of(conn, {"SET", "k", "before"}) == "OK");
    server.restart();
    CHECK(reply_of(conn, {"GET", "k"}) == "(nil)");
    CHECK(reply_of(conn, {"SET", "k", "after"}) == "OK");
    CHECK(server.command({"GET", "k"}) == "after");
}

TEST_CASE("a connection reconnects with its password and database after a restart") {
    RedisServerOptions options;
    options.requirepass = "pw";
    RedisServer server(options);
    Connection conn(server_config(port_url(server, ":pw@") + "/4"));
    CHECK(reply_of(conn, {"SET", "k", "v"}) == "OK");
    server.restart();
    CHECK(reply_of(conn, {"SET", "k", "v"}) == "OK");
    CHECK(server.command({"INFO", "keyspace"}).find("db4:keys=1,") != std::string::npos);
}

TEST_CASE("a request after the server went away and came back is retried on a new socket") {
    RedisServer server;
    Connection conn(server_config(server.url()));
    CHECK(reply_of(conn, {"PING"}) == "PONG");
    server.kill();
    const auto& down = request(conn, encode({"PING"}));
    REQUIRE(down.failure);
    CHECK(down.failure->kind == FailureKind::connect);
    server.restart();
    CHECK(reply_of(conn, {"PING"}) == "PONG");
}

TEST_CASE("EVALSHA of an unknown script falls back to EVAL of its source") {
    RedisServer server;
    const auto& script = redlock::lock::k_release_script;
    Connection conn(server_config(server.url()));
    REQUIRE(server.command({"SET", "lock:x", "tok"}) == "OK");
    REQUIRE(server.command({"SCRIPT", "FLUSH"}) == "OK");
    auto by_sha = encode({"EVALSHA", script.sha1, "2", "lock:x", "{lock:x}:meta", "tok"});
    auto by_source = encode({"EVAL", script.source, "2", "lock:x", "{lock:x}:meta", "tok"});
    const auto& outcome = request(conn, by_sha, by_source);
    REQUIRE(outcome.reply);
    CHECK(redlock::redis::describe(*outcome.reply) == "(integer) 1");
    CHECK(server.command({"EXISTS", "lock:x"}) == "0");
    // EVAL loaded it: the next EVALSHA needs no fallback.
    CHECK(server.command({"SCRIPT", "EXISTS", std::string(script.sha1)}) == "[1]");
}

TEST_CASE("EVALSHA of an unknown script without a fallback returns the NOSCRIPT error") {
    RedisServer server;
    Connection conn(server_config(server.url()));
    REQUIRE(server.command({"SCRIPT", "FLUSH"}) == "OK");
    auto reply =
        reply_of(conn, {"EVALSHA", redlock::lock::k_release_script.sha1, "2", "a", "b", "tok"});
    CHECK(reply.starts_with("NOSCRIPT"));
}

TEST_CASE("abandoning a request in flight makes it a timeout and closes the socket") {
    RedisServer server;
    Connection conn(server_config(server.url()));
    CHECK(reply_of(conn, {"PING"}) == "PONG");
    server.freeze();
    conn.start(encode({"PING"}), {}, Clock::now());
    REQUIRE(conn.busy());
    conn.abandon(Clock::now());
    CHECK_FALSE(conn.busy());
    REQUIRE(conn.outcome());
    REQUIRE(conn.outcome()->failure);
    CHECK(conn.outcome()->failure->kind == FailureKind::abandoned);
    CHECK(conn.outcome()->failure->detail == "not waited for (the round was decided without it)");
    CHECK(conn.fd() < 0);
    server.thaw();
    CHECK(reply_of(conn, {"PING"}) == "PONG");
}

namespace {

// The peak resident size of this process so far, in KB.
long peak_rss_kb() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss;
}

// A request to a server answering with what `answer` sends, with 1 s timeouts: what it cost.
// A hostile server must not hold it much past its timeout, nor make it allocate what the
// reply claims. The bounds are generous: they catch minutes and gigabytes.
struct Hostile {
    FakeServer server;
    Connection conn;
    const Outcome* outcome = nullptr;

    explicit Hostile(FakeServer::Answer answer)
        : server(std::move(answer)), conn(server_config(server.url(), 1s, 1s)) {
        const long rss_before = peak_rss_kb();
        const auto started = Clock::now();
        outcome = &request(conn, encode({"PING"}));
        CHECK(Clock::now() - started < 20s);
        CHECK(peak_rss_kb() - rss_before < 200 * 1024);
        CHECK(conn.fd() < 0); // dropped
    }
};

// Sends `head`, then `body` again and again until the peer is gone.
FakeServer::Answer flood(std::string head, std::string body) {
    return [head, body](const FakeServer::Peer& peer) {
        if (peer.send(head))
            while (peer.send(body)) {
            }
    };
}

std::string repeat(std::string_view s, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i)
        out += s;
    return out;
}

} // namespace

TEST_CASE("an array claiming 2^31-1 elements is a protocol failure, not 16 GB") {
    Hostile hostile(flood("*2147483647\r\n", repeat(":1\r\n", 16384)));
    REQUIRE(hostile.outcome->failure);
    CHECK(hostile.outcome->failure->kind == FailureKind::protocol);
    CHECK(hostile.outcome->failure->detail ==
          "protocol error: reply too large: array of 2147483647 elements");
}

TEST_CASE("a bulk string claiming 2^31 bytes is a protocol failure, not buffered") {
    Hostile hostile(flood("$2147483648\r\n", std::string(65536, 'x')));
    REQUIRE(hostile.outcome->failure);
    CHECK(hostile.outcome->failure->kind == FailureKind::protocol);
    CHECK(hostile.outcome->failure->detail ==
          "protocol error: reply too large: bulk string of 2147483648 bytes");
}

TEST_CASE("a million nested array headers are a protocol failure") {
    Hostile hostile(
        [](const FakeServer::Peer& peer) { (void)peer.send(repeat("*1\r\n", 1'000'000)); });
    REQUIRE(hostile.outcome->failure);
    CHECK(hostile.outcome->failure->kind == FailureKind::protocol);
    CHECK(hostile.outcome->failure->detail ==
          "protocol error: No support for nested multi bulk replies with depth > 7");
}

TEST_CASE("a reply that never ends is a timeout at the command timeout") {
    Hostile hostile([](const FakeServer::Peer& peer) {
        if (peer.send("$1000000\r\n"))
            while (peer.send("x"))
                std::this_thread::sleep_for(10ms);
    });
    REQUIRE(hostile.outcome->failure);
    CHECK(hostile.outcome->failure->kind == FailureKind::timeout);
    CHECK(hostile.outcome->failure->detail == "timed out");
    CHECK(hostile.outcome->latency >= 1s);
}

TEST_CASE("a real server's replies are read up to the limits and refused past them") {
    RedisServer server;
    Connection conn(server_config(server.url()));
    const auto limit = std::to_string(redlock::redis::k_max_reply_elements);
    REQUIRE(reply_of(conn, {"EVAL", "for i = 1, ARGV[1] do redis.call('rpush', KEYS[1], i) end",
                            "1", "list", limit}) == "(nil)");
    CHECK(reply_of(conn, {"LRANGE", "list", "0", "-1"}) == "(array of " + limit + ")");
    CHECK(reply_of(conn, {"RPUSH", "list", "one more"}) == "(integer) 65537");
    const auto& too_many = request(conn, encode({"LRANGE", "list", "0", "-1"}));
    REQUIRE(too_many.failure);
    CHECK(too_many.failure->kind == FailureKind::protocol);
    CHECK(too_many.failure->detail == "protocol error: reply too large: array of 65537 elements");
    CHECK(conn.fd() < 0);
    // The next request connects afresh.
    const std::string big(redlock::redis::k_max_reply_bytes - 100, 'v');
    CHECK(reply_of(conn, {"SET", "big", big}) == "OK");
    CHECK(reply_of(conn, {"STRLEN", "big"}) == "(integer) " + std::to_string(big.size()));
    CHECK(reply_of(conn, {"GET", "big"}) == big);
    CHECK(reply_of(conn, {"APPEND", "big", std::string(200, 'v')}).starts_with("(integer)"));
    const auto& too_big = request(conn, encode({"GET", "big"}));
    REQUIRE(too_big.failure);
    CHECK(too_big.failure->detail == "protocol error: reply too large: bulk string of " +
                                         std::to_string(big.size() + 200) + " bytes");
}
