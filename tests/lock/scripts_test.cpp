#include <string>

#include <doctest/doctest.h>

#include "lock/scripts.hpp"
#include "support/redis_server.hpp"

using redlock::lock::k_acquire_script;
using redlock::lock::k_inspect_script;
using redlock::lock::k_release_script;
using redlock::lock::k_renew_script;
using redlock::lock::Script;
using redlock::test::RedisServer;

namespace {
std::string load(const RedisServer& server, const Script& script) {
    return server.command({"SCRIPT", "LOAD", std::string(script.source)});
}
} // namespace

TEST_CASE("each script's sha1 constant is the one the server computes for its source") {
    RedisServer server;
    CHECK(load(server, k_acquire_script) == k_acquire_script.sha1);
    CHECK(load(server, k_renew_script) == k_renew_script.sha1);
    CHECK(load(server, k_release_script) == k_release_script.sha1);
    CHECK(load(server, k_inspect_script) == k_inspect_script.sha1);
}

TEST_CASE("the inspect script reports a free lock as nil, -2 and no metadata") {
    RedisServer server;
    CHECK(server.command({"EVAL", std::string(k_inspect_script.source), "2", "lock:x",
                          "{lock:x}:meta"}) == "[(nil), -2, []]");
    server.command({"SET", "lock:x", "tok", "PX", "60000"});
    server.command({"HSET", "{lock:x}:meta", "token", "tok"});
    auto held = server.command(
        {"EVAL", std::string(k_inspect_script.source), "2", "lock:x", "{lock:x}:meta"});
    CHECK(held.starts_with("[tok, "));
    CHECK(held.ends_with(", [token, tok]]"));
}
