#include <array>
#include <chrono>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "fleet/read.hpp"
#include "fleet/read_script.hpp"
#include "lock/scripts.hpp"
#include "support/redis_server.hpp"

using redlock::lock::Commands;
using redlock::lock::k_acquire_script;
using redlock::lock::k_fair_leave_script;
using redlock::lock::k_fence_script;
using redlock::lock::k_inspect_script;
using redlock::lock::k_release_script;
using redlock::lock::k_remove_wrong_type_script;
using redlock::lock::k_renew_script;
using redlock::lock::Script;
using redlock::test::RedisServer;

namespace {
std::string load(const RedisServer& server, const Script& script) {
    return server.command({"SCRIPT", "LOAD", std::string(script.source)});
}

const std::array<std::pair<std::string_view, const Script*>, 15> k_every_script{{
    {"acquire", &k_acquire_script},
    {"fence", &k_fence_script},
    {"renew", &k_renew_script},
    {"release", &k_release_script},
    {"inspect", &k_inspect_script},
    {"remove wrong type", &k_remove_wrong_type_script},
    {"fair leave", &k_fair_leave_script},
    {"acquire permit", &redlock::lock::k_acquire_permit_script},
    {"renew permit", &redlock::lock::k_renew_permit_script},
    {"release permit", &redlock::lock::k_release_permit_script},
    {"claim slot", &redlock::lock::k_claim_slot_script},
    {"finish slot", &redlock::lock::k_finish_slot_script},
    {"history", &redlock::lock::k_history_script},
    {"history page", &redlock::lock::k_history_page_script},
    {"fleet read", &redlock::fleet::k_read_script},
}};

// The commands `source` calls with redis.<how> ("call" or "pcall"). Every such call must
// name its command as a literal, or it could not be checked.
std::set<std::string> called_in(std::string_view source, std::string_view how) {
    const std::string needle = "redis." + std::string(how);
    std::set<std::string> names;
    for (size_t at = source.find(needle); at != std::string_view::npos;
         at = source.find(needle, at + 1)) {
        const size_t open = at + needle.size();
        INFO("at: ", source.substr(at, 40));
        REQUIRE(source.substr(open, 2) == "(\"");
        const size_t close = source.find('"', open + 2);
        REQUIRE(close != std::string_view::npos);
        names.emplace(source.substr(open + 2, close - open - 2));
    }
    return names;
}

std::set<std::string> names_of(Commands commands, const Commands& more = {}) {
    commands.add(more);
    const auto names = commands.names();
    return {names.begin(), names.end()};
}

// The source without the --fair parts, and those parts.
std::pair<std::string, std::string> split_fair(std::string source) {
    std::string fair;
    for (std::string_view part :
         {redlock::lock::k_fair_enrol.view(), redlock::lock::k_fair_head_held.view(),
          redlock::lock::k_fair_leave.view()})
        if (auto at = source.find(part); at != std::string::npos) {
            source.erase(at, part.size());
            fair += part;
        }
    return {source, fair};
}
} // namespace

TEST_CASE("each script's sha1 constant is the one the server computes for its source") {
    RedisServer server;
    for (const auto& [name, script] : k_every_script) {
        CAPTURE(name);
        CHECK(load(server, *script) == script->sha1);
    }
}

TEST_CASE("each script lists exactly the commands its source calls") {
    for (const auto& [name, script] : k_every_script) {
        CAPTURE(name);
        CHECK(names_of(script->calls, script->fair_calls) == called_in(script->source, "call"));
        CHECK(names_of(script->pcalls) == called_in(script->source, "pcall"));
    }
}

TEST_CASE("only the --fair parts of a script call what it lists as --fair's") {
    for (const auto& [name, script] : k_every_script) {
        CAPTURE(name);
        const auto [rest, fair] = split_fair(std::string(script->source));
        CHECK(names_of(script->calls) == called_in(rest, "call"));
        CHECK(names_of(script->fair_calls) == called_in(fair, "call"));
    }
    CHECK_FALSE(k_acquire_script.fair_calls.empty());
    CHECK_FALSE(k_acquire_script.fair_calls.empty());
}

TEST_CASE("the inspect script reports a free lock as nil, -2 and no metadata") {
    RedisServer server;
    CHECK(server.command({"EVAL", std::string(k_inspect_script.source), "3", "lock:x",
                          "{lock:x}:meta", "{lock:x}:fence"}) == "[(nil), -2, [], (nil), []]");
    server.command({"SET", "lock:x", "tok", "PX", "60000"});
    server.command({"HSET", "{lock:x}:meta", "token", "tok"});
    server.command({"SET", "{lock:x}:fence", "7"});
    auto held = server.command({"EVAL", std::string(k_inspect_script.source), "3", "lock:x",
                                "{lock:x}:meta", "{lock:x}:fence"});
    CHECK(held.starts_with("[tok, "));
    CHECK(held.ends_with(", [token, tok], 7, []]"));
    // With the slot record's key, the record too.
    server.command({"HSET", "{lock:x}:slot", "slot", "3"});
    CHECK(server
              .command({"EVAL", std::string(k_inspect_script.source), "4", "lock:x",
                        "{lock:x}:meta", "{lock:x}:fence", "{lock:x}:slot"})
              .ends_with(", [token, tok], 7, [slot, 3]]"));
}

TEST_CASE("the inspect script reads only the fields redlock knows, each clipped") {
    RedisServer server;
    server.command({"SET", "lock:x", "tok", "PX", "60000"});
    server.command({"HSET", "{lock:x}:meta", "token", "tok", "host", std::string(5000, 'h')});
    // Another client's hash of many fields: HGETALL's reply would be too large to read.
    std::vector<std::string> many{"HSET", "{lock:x}:meta"};
    for (int i = 0; i < 40000; ++i) {
        many.push_back("f" + std::to_string(i));
        many.push_back("v");
    }
    server.command(many);
    many[1] = "{lock:x}:slot";
    server.command(many);
    server.command({"HSET", "{lock:x}:slot", "slot", "3"});
    const auto held = server.command({"EVAL", std::string(k_inspect_script.source), "4", "lock:x",
                                      "{lock:x}:meta", "{lock:x}:fence", "{lock:x}:slot"});
    CHECK(
        held.ends_with(", [token, tok, host, " + std::string(4096, 'h') + "], (nil), [slot, 3]]"));
}

TEST_CASE("the inspect script reads every field of the metadata that redlock reads") {
    // The script's list of the metadata's fields is lock/holder.hpp's, in its order.
    std::string list = "{";
    for (auto name : redlock::lock::k_holder_field_names)
        list += (list.size() > 1 ? ", \"" : "\"") + std::string(name) + "\"";
    list += "}";
    CHECK(k_inspect_script.source.find("fields(KEYS[2], " + list + ")") != std::string_view::npos);
}

namespace {
// --once-per's claim of a slot of `length` ms (early: 0) by the holder of token `token`.
std::string claim(const RedisServer& server, const std::string& token, const std::string& length,
                  const std::string& early = "0") {
    return server.command({"EVAL", std::string(redlock::lock::k_claim_slot_script.source), "2",
                           "lock:x", "{lock:x}:slot", token, length, early, "host", "h"});
}
long long server_ms(const RedisServer& server) {
    auto t = server.command({"TIME"}); // "[seconds, microseconds]"
    auto comma = t.find(',');
    return std::stoll(t.substr(1, comma - 1)) * 1000 + std::stoll(t.substr(comma + 2)) / 1000;
}
} // namespace

TEST_CASE("a slot is claimed once, only by the lock's holder, and its record outlives it") {
    RedisServer server;
    CHECK(claim(server, "t1", "3600000") == "0"); // not holding the lock
    server.command({"SET", "lock:x", "t1", "PX", "60000"});
    const long long before = server_ms(server);
    CHECK(claim(server, "t1", "3600000") == "1");
    const long long after = server_ms(server);
    CHECK(server.command({"HGET", "{lock:x}:slot", "host"}) == "h");
    const long long slot = std::stoll(server.command({"HGET", "{lock:x}:slot", "slot"}));
    CHECK(slot >= before / 3600000);
    CHECK(slot <= after / 3600000);
    // Kept until a whole slot after its own: between one and two slots from now.
    auto pttl = std::stoll(server.command({"PTTL", "{lock:x}:slot"}));
    CHECK(pttl > 3600000);
    CHECK(pttl <= 2 * 3600000);
    // Run again (the same holder, or the next one): the slot is done.
    CHECK(claim(server, "t1", "3600000") == "-1");
    server.command({"SET", "lock:x", "t2", "PX", "60000"});
    CHECK(claim(server, "t2", "3600000") == "-1");
    // A record of a later slot (a server whose clock went back) refuses too.
    server.command({"HSET", "{lock:x}:slot", "slot", std::to_string(slot + 5)});
    CHECK(claim(server, "t2", "3600000") == "-1");
    // A record that is not one (garbage) does not block the slot forever.
    server.command({"HSET", "{lock:x}:slot", "slot", "soon"});
    CHECK(claim(server, "t2", "3600000") == "1");
    CHECK(server.command({"HGET", "{lock:x}:slot", "token"}) == "t2");
}

TEST_CASE("a run starting just before its slot counts for that slot") {
    RedisServer server;
    server.command({"SET", "lock:x", "t1", "PX", "60000"});
    // A whole slot early: counted for the slot after the one the server's clock is in.
    const long long before = server_ms(server);
    CHECK(claim(server, "t1", "1000", "1000") == "1");
    const long long after = server_ms(server);
    const long long slot = std::stoll(server.command({"HGET", "{lock:x}:slot", "slot"}));
    CHECK(slot >= before / 1000 + 1);
    CHECK(slot <= after / 1000 + 1);
}

TEST_CASE("the end of a run is recorded only in its own slot record") {
    RedisServer server;
    server.command({"SET", "lock:x", "t1", "PX", "60000"});
    REQUIRE(claim(server, "t1", "1000") == "1");
    auto finish = [&](const std::string& token) {
        return server.command({"EVAL", std::string(redlock::lock::k_finish_slot_script.source), "1",
                               "{lock:x}:slot", token, "3", "600000"});
    };
    CHECK(finish("someone-else") == "0");
    CHECK(server.command({"HGET", "{lock:x}:slot", "status"}) == "(nil)");
    CHECK(finish("t1") == "1");
    CHECK(server.command({"HGET", "{lock:x}:slot", "status"}) == "3");
    CHECK(std::stoll(server.command({"HGET", "{lock:x}:slot", "ended_ms"})) >=
          std::stoll(server.command({"HGET", "{lock:x}:slot", "started_ms"})));
    // Kept at least as long as asked from the end on.
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:slot"})) > 500000);
}

TEST_CASE("a run whose program could not start gives its slot back, and says why") {
    RedisServer server;
    server.command({"SET", "lock:x", "t1", "PX", "60000"});
    REQUIRE(claim(server, "t1", "3600000") == "1");
    const auto script = std::string(redlock::lock::k_finish_slot_script.source);
    CHECK(server.command({"EVAL", script, "1", "{lock:x}:slot", "t1", "127", "600000",
                          "cannot run 'x': No such file or directory"}) == "1");
    CHECK(server.command({"HGET", "{lock:x}:slot", "start_error"}) ==
          "cannot run 'x': No such file or directory");
    CHECK(server.command({"HGET", "{lock:x}:slot", "status"}) == "127");
    // The slot is open: the next holder claims it, and its record replaces the failed one.
    server.command({"SET", "lock:x", "t2", "PX", "60000"});
    CHECK(claim(server, "t2", "3600000") == "1");
    CHECK(server.command({"HGET", "{lock:x}:slot", "token"}) == "t2");
    CHECK(server.command({"HEXISTS", "{lock:x}:slot", "start_error"}) == "0");
    CHECK(claim(server, "t2", "3600000") == "-1");
    // A failed start gives back its own slot only, never an earlier one (the record stays
    // a max-register of slots).
    const long long slot = std::stoll(server.command({"HGET", "{lock:x}:slot", "slot"}));
    server.command(
        {"HSET", "{lock:x}:slot", "slot", std::to_string(slot + 1), "start_error", "cannot run"});
    CHECK(claim(server, "t2", "3600000") == "-1");
}

namespace {
std::string eval(const RedisServer& server, const Script& script,
                 std::initializer_list<std::string> args) {
    std::vector<std::string> argv{
        "EVAL", std::string(script.source), "3", "lock:x", "{lock:x}:meta", "{lock:x}:fence"};
    argv.insert(argv.end(), args);
    return server.command(argv);
}

// An acquire script's "held" reply carries the holder's PTTL: -2 - PTTL.
bool held_with_pttl_near(const std::string& reply, long long pttl) {
    long long held = redlock::lock::held_pttl(std::stoll(reply));
    return held <= pttl && held > pttl - 10000;
}
} // namespace

TEST_CASE("the single-server acquire script increments the fence only when it acquires") {
    RedisServer server;
    CHECK(eval(server, k_acquire_script, {"t1", "60000", "host", "h"}) == "1");
    CHECK(held_with_pttl_near(eval(server, k_acquire_script, {"t2", "60000"}), 60000));
    CHECK(server.command({"GET", "{lock:x}:fence"}) == "1");
    CHECK(server.command({"HGET", "{lock:x}:meta", "fence"}) == "1");
    server.command({"DEL", "lock:x"});
    CHECK(eval(server, k_acquire_script, {"t3", "60000"}) == "2");
    CHECK(server.command({"PTTL", "{lock:x}:fence"}) == "-1");
}

TEST_CASE("the round-1 acquire script increments the counter only when it acquires, and "
          "records it") {
    RedisServer server;
    CHECK(eval(server, k_acquire_script, {"t1", "60000", "host", "h"}) == "1");
    CHECK(server.command({"GET", "{lock:x}:fence"}) == "1");
    CHECK(server.command({"HGET", "{lock:x}:meta", "fence"}) == "1");
    CHECK(server.command({"PTTL", "{lock:x}:fence"}) == "-1");
    server.command({"DEL", "lock:x"});
    server.command({"SET", "{lock:x}:fence", "41"});
    CHECK(eval(server, k_acquire_script, {"t2", "60000"}) == "42");
    CHECK(held_with_pttl_near(eval(server, k_acquire_script, {"t3", "60000"}), 60000));
    CHECK(server.command({"GET", "{lock:x}:fence"}) == "42");
    // A key some other client set with no expiry: PTTL -1, so -1.
    server.command({"SET", "lock:x", "foreign"});
    CHECK(eval(server, k_acquire_script, {"t4", "60000"}) == "-1");
    CHECK(eval(server, k_acquire_script, {"t4", "60000"}) == "-1");
}

namespace {
// The acquire scripts with --fair's queue: token, ticket, a 3 s drop.
// An attempt with lock token `token` by the waiter `waiter` (its place in the queue; by
// default named as the token).
std::string fair(const RedisServer& server, const Script& script, const std::string& token,
                 const std::string& ticket, std::string waiter = {}) {
    if (waiter.empty())
        waiter = token;
    return server.command({"EVAL", std::string(script.source), "6", "lock:x", "{lock:x}:meta",
                           "{lock:x}:fence", "{lock:x}:queue", "{lock:x}:waiting",
                           "{lock:x}:tickets", token, "60000", ticket, "3000", waiter,
                           "{lock:x}:w:"});
}
} // namespace

TEST_CASE("the queue's keys expire ten drops after the last attempt, renewed by one PTTL, "
          "not three PEXPIREs, while most of it is left") {
    RedisServer server;
    server.command({"SET", "lock:x", "holder", "PX", "60000"});
    auto pttl = [&](const char* key) { return std::stoll(server.command({"PTTL", key})); };
    server.command({"INCR", "{lock:x}:tickets"}); // take_ticket's, with no TTL yet
    CHECK(held_with_pttl_near(fair(server, k_acquire_script, "a", "1"), 9000));
    for (const char* key : {"{lock:x}:queue", "{lock:x}:waiting", "{lock:x}:tickets"}) {
        CAPTURE(key);
        CHECK(pttl(key) > 29000);
        CHECK(pttl(key) <= 30000);
    }
    // A newcomer (its ticket above the counter here: taken on other servers) joins the
    // queue: the counter is raised and keeps its TTL, and nothing is renewed.
    server.command({"CONFIG", "RESETSTAT"});
    CHECK(held_with_pttl_near(fair(server, k_acquire_script, "b", "5"), 12000));
    CHECK(server.command({"GET", "{lock:x}:tickets"}) == "5");
    CHECK(pttl("{lock:x}:tickets") > 29000);
    CHECK(server.command({"INFO", "commandstats"}).find("cmdstat_pexpire:") == std::string::npos);
    // Less than nine drops left: the next attempt renews all three.
    server.command({"PEXPIRE", "{lock:x}:queue", "5000"});
    CHECK(held_with_pttl_near(fair(server, k_acquire_script, "b", "5"), 12000));
    CHECK(pttl("{lock:x}:queue") > 29000);
}

TEST_CASE("with a queue, only its head acquires, and in ticket order on any server") {
    for (const Script* script : {&k_acquire_script}) {
        RedisServer server;
        server.command({"SET", "lock:x", "holder", "PX", "60000"});
        // Enrolled in the order of their tickets, not of their first attempt. The head of
        // the queue, held off by the lock, is told to look again within 3 x 3 s (it keeps
        // the queue alive), however long the lease.
        CHECK(held_with_pttl_near(fair(server, *script, "second", "2"), 9000));
        CHECK(held_with_pttl_near(fair(server, *script, "first", "1"), 9000));
        CHECK(server.command({"ZRANGE", "{lock:x}:queue", "0", "-1"}) == "[first, second]");
        CHECK(server.command({"GET", "{lock:x}:tickets"}) == "2");
        server.command({"DEL", "lock:x"});
        // Free, but "first" is ahead and alive: not "second"'s turn. It is told the lock is
        // held until "first" could be dropped (3 s of silence), not that it is free.
        const auto wait =
            redlock::lock::held_pttl(std::stoll(fair(server, *script, "second", "2")));
        CHECK(wait > 2000);
        CHECK(wait <= 3000);
        CHECK(fair(server, *script, "first", "1") == "1");
        CHECK(server.command({"ZRANGE", "{lock:x}:queue", "0", "-1"}) == "[second]");
        CHECK(server.command({"ZSCORE", "{lock:x}:waiting", "first"}) == "(nil)");
        auto keep = std::stoll(server.command({"PTTL", "{lock:x}:queue"}));
        CHECK((keep > 0 && keep <= 30000));
    }
}

TEST_CASE("the head of the queue takes a free lock with one look at the queue, and records "
          "an attempt that finds it held") {
    RedisServer server;
    server.command({"SET", "lock:x", "holder", "PX", "60000"});
    CHECK(held_with_pttl_near(fair(server, k_acquire_script, "head", "1"), 9000));
    CHECK(held_with_pttl_near(fair(server, k_acquire_script, "next", "2"), 12000));
    // The head, still held off: its attempt is recorded (the time it was last seen moves
    // on), as a waiter's that is not the head.
    server.command({"ZADD", "{lock:x}:waiting", "XX", "1000", "head"});
    CHECK(held_with_pttl_near(fair(server, k_acquire_script, "head", "1"), 9000));
    CHECK(std::stoll(server.command({"ZSCORE", "{lock:x}:waiting", "head"})) >
          server_ms(server) - 10000);
    // Free: the head takes it with no TIME, no enrolment, no renewal, and leaves.
    server.command({"DEL", "lock:x"});
    server.command({"CONFIG", "RESETSTAT"});
    CHECK(fair(server, k_acquire_script, "head", "1") == "1");
    const auto stats = server.command({"INFO", "commandstats"});
    for (const char* unused : {"cmdstat_time:", "cmdstat_zadd:", "cmdstat_pexpire:"}) {
        CAPTURE(unused);
        CHECK(stats.find(unused) == std::string::npos);
    }
    CHECK(stats.find("cmdstat_zrange:calls=1,") != std::string::npos);
    CHECK(stats.find("cmdstat_pttl:calls=1,") != std::string::npos); // the lock's alone
    CHECK(server.command({"ZRANGE", "{lock:x}:queue", "0", "-1"}) == "[next]");
    CHECK(server.command({"ZSCORE", "{lock:x}:waiting", "head"}) == "(nil)");
    // A newcomer behind a live head: the one look at the head serves the whole attempt.
    server.command({"SET", "lock:x", "holder", "PX", "60000"});
    server.command({"CONFIG", "RESETSTAT"});
    CHECK(redlock::lock::held_pttl(std::stoll(fair(server, k_acquire_script, "late", "3"))) > 2000);
    CHECK(server.command({"INFO", "commandstats"}).find("cmdstat_zrange:calls=1,") !=
          std::string::npos);
    CHECK(server.command({"ZRANGE", "{lock:x}:queue", "0", "-1"}) == "[next, late]");
}

TEST_CASE("a silent waiter at the head of the queue is dropped") {
    RedisServer server;
    server.command({"ZADD", "{lock:x}:queue", "1", "dead"});
    server.command({"ZADD", "{lock:x}:waiting", "1000", "dead"}); // its last attempt: 1970
    CHECK(fair(server, k_acquire_script, "alive", "2") == "1");
    CHECK(server.command({"EXISTS", "{lock:x}:queue"}) == "0");
    CHECK(server.command({"EXISTS", "{lock:x}:waiting"}) == "0");
}

TEST_CASE("a head of the queue last seen in the future is taken as seen now, and lapses") {
    for (const Script* script : {&k_acquire_script}) {
        RedisServer server;
        const long long now = server_ms(server);
        server.command({"ZADD", "{lock:x}:queue", "1", "ghost"});
        // A day ahead: a server clock stepped back, or a forged entry.
        server.command({"ZADD", "{lock:x}:waiting", std::to_string(now + 86400000), "ghost"});
        // Not our turn yet, but for the few seconds a silent waiter is given, not a day.
        const auto wait = redlock::lock::held_pttl(std::stoll(fair(server, *script, "alive", "2")));
        CHECK(wait > 2000);
        CHECK(wait <= 3000);
        const long long seen = std::stoll(server.command({"ZSCORE", "{lock:x}:waiting", "ghost"}));
        CHECK(seen >= now);
        CHECK(seen < now + 10000);
        // Once that has passed, the head is dropped like any silent waiter.
        server.command({"ZADD", "{lock:x}:waiting", std::to_string(now - 5000), "ghost"});
        CHECK(fair(server, *script, "alive", "2") == "1");
        CHECK(server.command({"EXISTS", "{lock:x}:queue"}) == "0");
    }
}

TEST_CASE("a waiter keeps its place while each attempt has a fresh lock token") {
    for (const Script* script : {&k_acquire_script}) {
        RedisServer server;
        server.command({"SET", "lock:x", "holder", "PX", "60000"});
        CHECK(held_with_pttl_near(fair(server, *script, "token-1", "1", "me"), 9000));
        CHECK(held_with_pttl_near(fair(server, *script, "token-2", "1", "me"), 9000));
        CHECK(server.command({"ZRANGE", "{lock:x}:queue", "0", "-1"}) == "[me]");
        server.command({"DEL", "lock:x"});
        // Acquired with the attempt's token; the place is left by the waiter's id.
        CHECK(fair(server, *script, "token-3", "1", "me") != "0");
        CHECK(server.command({"GET", "lock:x"}) == "token-3");
        CHECK(server.command({"EXISTS", "{lock:x}:queue"}) == "0");
    }
}

TEST_CASE("the leave script takes a waiter out of the queue") {
    RedisServer server;
    server.command({"SET", "lock:x", "holder", "PX", "60000"});
    (void)fair(server, k_acquire_script, "w", "1");
    CHECK(server.command({"EVAL", std::string(k_fair_leave_script.source), "2", "{lock:x}:queue",
                          "{lock:x}:waiting", "w"}) == "1");
    CHECK(server.command({"EXISTS", "{lock:x}:queue"}) == "0");
    CHECK(server.command({"EXISTS", "{lock:x}:waiting"}) == "0");
}

TEST_CASE("the release script deletes only our token, with or without a release channel") {
    RedisServer server;
    server.command({"SET", "lock:x", "mine", "PX", "60000"});
    // That the notice reaches a waiter is checked end to end (tests/e2e/test_waiting.py).
    CHECK(eval(server, k_release_script, {"other", "{lock:x}:released"}) == "0");
    CHECK(eval(server, k_release_script, {"mine", "{lock:x}:released"}) == "1");
    server.command({"SET", "lock:x", "mine", "PX", "60000"});
    CHECK(eval(server, k_release_script, {"mine"}) == "1");
}

namespace {
// How many PUBLISH the server ran (scripts' included) since the last call.
long long publishes(RedisServer& server) {
    const std::string info = server.command({"INFO", "commandstats"});
    server.command({"CONFIG", "RESETSTAT"});
    const auto at = info.find("cmdstat_publish:calls=");
    return at == std::string::npos ? 0 : std::stoll(info.substr(at + 22));
}
} // namespace

TEST_CASE("the release notice goes out wherever the lock is now free, not where another holds "
          "it") {
    RedisServer server;
    (void)publishes(server);
    server.command({"SET", "lock:x", "mine", "PX", "60000"});
    CHECK(eval(server, k_release_script, {"mine", "{lock:x}:released"}) == "1");
    CHECK(publishes(server) == 1);
    // Never ours here (an acquisition that won elsewhere): free all the same, and a waiter
    // that listens only to this server must hear of the release.
    CHECK(eval(server, k_release_script, {"mine", "{lock:x}:released"}) == "0");
    CHECK(publishes(server) == 1);
    server.command({"SET", "lock:x", "other", "PX", "60000"});
    CHECK(eval(server, k_release_script, {"mine", "{lock:x}:released"}) == "0");
    CHECK(publishes(server) == 0);
    CHECK(server.command({"GET", "lock:x"}) == "other");
}

TEST_CASE("the fence script raises the counter only under our token and never lowers it") {
    RedisServer server;
    server.command({"SET", "lock:x", "mine", "PX", "60000"});
    server.command({"HSET", "{lock:x}:meta", "token", "mine"});
    CHECK(eval(server, k_fence_script, {"other", "5"}) == "0");
    CHECK(server.command({"EXISTS", "{lock:x}:fence"}) == "0");
    CHECK(eval(server, k_fence_script, {"mine", "5"}) == "1");
    CHECK(server.command({"GET", "{lock:x}:fence"}) == "5");
    CHECK(server.command({"HGET", "{lock:x}:meta", "fence"}) == "5");
    CHECK(eval(server, k_fence_script, {"mine", "3"}) == "0");
    CHECK(server.command({"GET", "{lock:x}:fence"}) == "5");
    // No metadata hash: none is created (it would have no TTL).
    server.command({"DEL", "{lock:x}:meta"});
    CHECK(eval(server, k_fence_script, {"mine", "6"}) == "1");
    CHECK(server.command({"EXISTS", "{lock:x}:meta"}) == "0");
}

TEST_CASE("a fence counter that is not a number is an error, never read as zero") {
    RedisServer server;
    // Lua's tonumber() takes all but the first; INCR none of them, and a negative counter
    // would give fences below 1.
    // Nor 10^18 and above: the INCR after the SET must not fail (2^63 - 1 is its limit).
    for (const char* bad : {"garbage", "007", "-5", "5.0", "1e3", "+5", " 5", "1000000000000000000",
                            "9223372036854775807"}) {
        CAPTURE(bad);
        server.command({"SET", "{lock:x}:fence", bad});
        CHECK(eval(server, k_acquire_script, {"t1", "60000"}).find("is not a number") !=
              std::string::npos);
        CHECK(eval(server, k_acquire_script, {"t1", "60000"}).find("is not a number") !=
              std::string::npos);
        CHECK(server.command({"EXISTS", "lock:x"}) == "0");
        CHECK(server.command({"GET", "{lock:x}:fence"}) == bad);
    }
    server.command({"SET", "{lock:x}:fence", "999999999999999999"}); // the next is 10^18
    CHECK(eval(server, k_acquire_script, {"t1", "60000"}).find("is not a number") !=
          std::string::npos);
    CHECK(server.command({"GET", "{lock:x}:fence"}) == "999999999999999999");
}

TEST_CASE("a won attempt takes its fence with one INCR, and reads no counter first") {
    RedisServer server;
    server.command({"SET", "{lock:x}:fence", "41"});
    server.command({"CONFIG", "RESETSTAT"});
    REQUIRE(eval(server, k_acquire_script, {"t1", "60000", "host", "h"}) == "42");
    const auto stats = server.command({"INFO", "commandstats"});
    CHECK(stats.find("cmdstat_get:") == std::string::npos);
    CHECK(stats.find("cmdstat_incr:calls=1,") != std::string::npos);
    CHECK(server.command({"HGET", "{lock:x}:meta", "fence"}) == "42");
}

namespace {
// A --limit script on permit `permit` of lock:x.
std::string permit_call(const RedisServer& server, const Script& script, int permit,
                        std::vector<std::string> args) {
    const auto base = "{lock:x}:permit:" + std::to_string(permit);
    std::vector<std::string> argv{"EVAL",
                                  std::string(script.source),
                                  "5",
                                  base,
                                  base + ":meta",
                                  base + ":fence",
                                  "lock:x",
                                  "{lock:x}:limit"};
    argv.insert(argv.end(), args.begin(), args.end());
    return server.command(argv);
}
std::string take(const RedisServer& server, int permit, const std::string& token,
                 const std::string& limit = "3", const std::string& single = "1") {
    return permit_call(server, redlock::lock::k_acquire_permit_script, permit,
                       {token, "60000", limit, single, "host", "h"});
}
// Whether the server has Redis 7's PEXPIRETIME (and PEXPIREAT GT, SET PXAT); Redis 6 has not.
bool has_pexpiretime(const RedisServer& server) {
    return !server.command({"PEXPIRETIME", "lock:x"}).starts_with("(error)");
}
// The name's set and its limit expire together: in the same ms where the script gives both
// the same instant (Redis 7); on Redis 6, which has no SET PXAT, the limit at most a few ms
// after the set (its PX counts from the script's TIME), never before.
void check_limit_expires_with_the_set(const RedisServer& server) {
    if (has_pexpiretime(server)) {
        CHECK(server.command({"PEXPIRETIME", "lock:x"}) ==
              server.command({"PEXPIRETIME", "{lock:x}:limit"}));
        return;
    }
    const auto both =
        server.command({"EVAL", "return {redis.call('pttl', KEYS[1]), redis.call('pttl', KEYS[2])}",
                        "2", "lock:x", "{lock:x}:limit"});
    const auto comma = both.find(',');
    const long long set = std::stoll(both.substr(1, comma - 1));
    const long long limit = std::stoll(both.substr(comma + 2));
    CHECK(set > 0);
    CHECK(limit >= set);
    CHECK(limit <= set + 100);
}
} // namespace

TEST_CASE("a permit is one lock of its own, and the name's set tracks its holders") {
    RedisServer server;
    CHECK(take(server, 1, "a") == "1"); // single server: the permit's own fence
    CHECK(take(server, 2, "b") == "1");
    CHECK(held_with_pttl_near(take(server, 1, "c"), 60000));
    CHECK(server.command({"TYPE", "lock:x"}) == "zset");
    CHECK(server.command({"ZRANGE", "lock:x", "0", "-1"}) == "[a, b]");
    CHECK(server.command({"GET", "{lock:x}:limit"}) == "3");
    CHECK(server.command({"HGET", "{lock:x}:permit:1:meta", "fence"}) == "1");
    // The set's expiry: the end of the sixteenth of b's lease in which b's lease ends.
    auto pttl = std::stoll(server.command({"PTTL", "lock:x"}));
    CHECK(pttl > 50000);
    CHECK(pttl <= 60000 + 60000 / 16);
    check_limit_expires_with_the_set(server);
    // Round 1 over several servers: the same increment.
    CHECK(take(server, 3, "d", "3", "0") == "1");
    CHECK(server.command({"GET", "{lock:x}:permit:3:fence"}) == "1");
    // A plain lock's SET NX finds the name taken.
    CHECK(server.command({"SET", "lock:x", "plain", "NX", "PX", "1000"}) == "(nil)");
}

TEST_CASE("holders with another limit refuse a permit, until none is left") {
    RedisServer server;
    REQUIRE(take(server, 1, "a") == "1");
    CHECK(take(server, 2, "b", "5") == "(error) LIMIT 3");
    CHECK(take(server, 2, "b", "2") == "(error) LIMIT 3");
    // An expired holder (its lease over by the server's clock) is dropped, and counts no more.
    server.command({"ZADD", "lock:x", "1", "a"});
    CHECK(take(server, 2, "b", "5") == "1");
    CHECK(server.command({"ZRANGE", "lock:x", "0", "-1"}) == "[b]");
    CHECK(server.command({"GET", "{lock:x}:limit"}) == "5");
}

TEST_CASE("every permit held: no permit is tried, the reply says so, and a waiter enlists") {
    using redlock::lock::every_permit_held;
    using redlock::lock::held_pttl;
    using redlock::lock::k_acquire_permit_script;
    RedisServer server;
    // The script's literal is the constant the client decodes.
    CHECK(std::string_view(k_acquire_permit_script.source)
              .find(std::to_string(redlock::lock::k_every_permit_held)) != std::string_view::npos);
    REQUIRE(take(server, 1, "a", "2") == "1");
    // One permit of two free: a held one says only its own PTTL.
    const auto one = std::stoll(take(server, 1, "b", "2"));
    CHECK_FALSE(every_permit_held(one));
    REQUIRE(take(server, 2, "b", "2") == "1");
    // Both held: whichever is asked, "every permit held", with the first lease's end.
    const auto base = std::string("{lock:x}:permit:1");
    auto waiter = [&](const std::string& token, const std::string& listed) {
        return server.command({"EVAL", std::string(k_acquire_permit_script.source), "6", base,
                               base + ":meta", base + ":fence", "lock:x", "{lock:x}:limit",
                               "{lock:x}:waiters", token, "60000", "2", "1", "1000", listed, "w1",
                               "host", "h"});
    };
    const auto all = std::stoll(waiter("c", "0"));
    CHECK(every_permit_held(all));
    CHECK(held_pttl(all) > 50000);
    CHECK(held_pttl(all) <= 60000);
    CHECK(server.command({"ZRANGE", "{lock:x}:waiters", "0", "-1", "WITHSCORES"}) == "[w1, 1000]");
    // A release frees permit 1: the waiter takes it and leaves the wait list.
    using redlock::lock::k_release_permit_script;
    REQUIRE(permit_call(server, k_release_permit_script, 1, {"a"}) == "1");
    CHECK(waiter("c", "1") == "2");
    CHECK(server.command({"EXISTS", "{lock:x}:waiters"}) == "0");
    CHECK(server.command({"HGET", "{lock:x}:permit:1:meta", "host"}) == "h");
}

TEST_CASE("a permit's fence counter that is not a number is an error, and nothing is taken") {
    RedisServer server;
    for (const char* bad : {"banana", "-5", "1000000000000000000"}) {
        CAPTURE(bad);
        server.command({"SET", "{lock:x}:permit:1:fence", bad});
        CHECK(take(server, 1, "a").find("is not a number") != std::string::npos);
        CHECK(server.command({"EXISTS", "{lock:x}:permit:1", "lock:x", "{lock:x}:limit",
                              "{lock:x}:permit:1:meta"}) == "0");
        CHECK(server.command({"GET", "{lock:x}:permit:1:fence"}) == bad);
    }
    // Other permits are not held up by it.
    CHECK(take(server, 2, "a") == "1");
}

TEST_CASE("a permit's release wakes the --fair queue only when it leaves the name free") {
    RedisServer server;
    REQUIRE(take(server, 1, "a", "2") == "1");
    REQUIRE(take(server, 2, "b", "2") == "1");
    auto release = [&](int permit, const std::string& token) {
        const auto base = "{lock:x}:permit:" + std::to_string(permit);
        return server.command({"EVAL", std::string(redlock::lock::k_release_permit_script.source),
                               "7", base, base + ":meta", base + ":fence", "lock:x",
                               "{lock:x}:limit", "{lock:x}:waiters", "{lock:x}:queue", token,
                               "{lock:x}:released", "{lock:x}:w:", "1", std::to_string(permit)});
    };
    auto zranges = [&] {
        const auto stats = server.command({"INFO", "commandstats"});
        const auto at = stats.find("cmdstat_zrange:calls=");
        return at == std::string::npos ? 0 : std::stoi(stats.substr(at + 21));
    };
    server.command({"CONFIG", "RESETSTAT"});
    REQUIRE(release(1, "a") == "1");
    CHECK(zranges() == 1); // the wait list alone: b still holds a permit
    server.command({"CONFIG", "RESETSTAT"});
    REQUIRE(release(2, "b") == "1");
    CHECK(zranges() == 2); // the name is free: the --fair queue's waiters may take it
    CHECK(server.command({"EXISTS", "lock:x", "{lock:x}:limit"}) == "0");
}

TEST_CASE("a permit is not given while a plain lock holds the name") {
    RedisServer server;
    server.command({"SET", "lock:x", "plain", "PX", "60000"});
    CHECK(held_with_pttl_near(take(server, 1, "a"), 60000));
    CHECK(server.command({"EXISTS", "{lock:x}:permit:1"}) == "0");
}

TEST_CASE("renewing and releasing a permit keep the name's set in step") {
    RedisServer server;
    REQUIRE(take(server, 1, "a") == "1");
    REQUIRE(take(server, 2, "b") == "1");
    using redlock::lock::k_release_permit_script;
    using redlock::lock::k_renew_permit_script;
    CHECK(permit_call(server, k_renew_permit_script, 1, {"other", "90000"}) == "0");
    CHECK(permit_call(server, k_renew_permit_script, 1, {"a", "90000"}) == "1");
    CHECK(std::stoll(server.command({"PTTL", "lock:x"})) > 60000);
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:limit"})) > 60000);
    CHECK(permit_call(server, k_release_permit_script, 1, {"other"}) == "0");
    CHECK(permit_call(server, k_release_permit_script, 1, {"a"}) == "1");
    CHECK(server.command({"ZRANGE", "lock:x", "0", "-1"}) == "[b]");
    // A release leaves the set's expiry where it was (a's renewed lease: at least the
    // longest left, which is all it has to be); the last holder's takes the set away.
    CHECK(std::stoll(server.command({"PTTL", "lock:x"})) > 60000);
    CHECK(permit_call(server, k_release_permit_script, 2, {"b", "{lock:x}:released"}) == "1");
    CHECK(server.command({"EXISTS", "lock:x", "{lock:x}:limit"}) == "0");
    // A new holder's lease, shorter than what the set had, is what it expires with now;
    // a longer one's extends it, a shorter one's does not shorten it.
    REQUIRE(permit_call(server, redlock::lock::k_acquire_permit_script, 1,
                        {"c", "20000", "3", "1", "host", "h"}) == "2");
    CHECK(std::stoll(server.command({"PTTL", "lock:x"})) <= 20000);
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:limit"})) <= 20000);
    REQUIRE(take(server, 2, "d") == "2");
    CHECK(std::stoll(server.command({"PTTL", "lock:x"})) > 50000);
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:limit"})) > 50000);
    REQUIRE(permit_call(server, redlock::lock::k_acquire_permit_script, 3,
                        {"e", "10000", "3", "1", "host", "h"}) == "1");
    CHECK(std::stoll(server.command({"PTTL", "lock:x"})) > 50000);
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:limit"})) > 50000);
}

TEST_CASE("acquisitions within a sixteenth of a lease move the set's expiry once, and the "
          "limit's with it") {
    RedisServer server;
    REQUIRE(take(server, 1, "a") == "1");
    // Holders, and a set's expiry that ends a sixteenth: the next acquisitions (well within
    // that sixteenth: its end is an hour away) need not move it.
    const long long until = server_ms(server) + 3600000;
    const auto at = std::to_string(until - until % (60000 / 16) + 60000 / 16);
    server.command({"PEXPIREAT", "lock:x", at});
    server.command({"PEXPIREAT", "{lock:x}:limit", at});
    server.command({"CONFIG", "RESETSTAT"});
    REQUIRE(take(server, 2, "b") == "1");
    REQUIRE(take(server, 3, "c") == "1");
    const auto stats = server.command({"INFO", "commandstats"});
    if (!has_pexpiretime(server)) {
        // Redis 6 has no GT: each acquisition moves both to the longest lease held.
        const auto pttl = std::stoll(server.command({"PTTL", "lock:x"}));
        CHECK(pttl > 50000);
        CHECK(pttl <= 60000);
        check_limit_expires_with_the_set(server);
        return;
    }
    CHECK(stats.find("cmdstat_pexpireat:calls=2,") != std::string::npos); // the set's alone
    CHECK(server.command({"PEXPIRETIME", "lock:x"}) == at);
    CHECK(server.command({"PEXPIRETIME", "{lock:x}:limit"}) == at);
}

TEST_CASE("holders whose lease is over are dropped when they would fill every permit") {
    RedisServer server;
    REQUIRE(take(server, 1, "a", "2") == "1");
    REQUIRE(take(server, 2, "b", "2") == "1");
    // Every permit held, no lease over: nothing to drop, and no pruning tried.
    server.command({"CONFIG", "RESETSTAT"});
    CHECK(redlock::lock::every_permit_held(std::stoll(take(server, 1, "c", "2"))));
    CHECK(server.command({"INFO", "commandstats"}).find("cmdstat_zremrangebyscore") ==
          std::string::npos);
    // a's lease over by the server's clock (it died without a release; its permit key,
    // deleted here, would have expired with it).
    server.command({"ZADD", "lock:x", "1", "a"});
    server.command({"DEL", "{lock:x}:permit:1"});
    CHECK(take(server, 1, "c", "2") == "2");
    CHECK(server.command({"ZRANGE", "lock:x", "0", "-1"}) == "[b, c]");
}

TEST_CASE("a holder's metadata replaces whatever another left, and costs no DEL otherwise") {
    RedisServer server;
    // A hash left behind (the lock deleted by hand): none of its fields stays.
    server.command({"HSET", "{lock:x}:permit:1:meta", "host", "old", "note", "stale"});
    REQUIRE(take(server, 1, "a") == "1");
    CHECK(server.command({"HGETALL", "{lock:x}:permit:1:meta"}) == "[fence, 1, host, h]");
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:permit:1:meta"})) > 50000);
    server.command({"FLUSHALL"});
    server.command({"HSET", "{lock:x}:meta", "host", "old", "note", "stale"});
    REQUIRE(eval(server, k_acquire_script, {"t", "60000", "host", "h"}) == "1");
    CHECK(server.command({"HGETALL", "{lock:x}:meta"}) == "[fence, 1, host, h]");
    // A run that writes no metadata leaves none.
    REQUIRE(eval(server, k_release_script, {"t"}) == "1");
    server.command({"HSET", "{lock:x}:meta", "host", "old"});
    REQUIRE(eval(server, k_acquire_script, {"u", "60000"}) == "2");
    CHECK(server.command({"EXISTS", "{lock:x}:meta"}) == "0");
    // The usual case, no hash there: one HSET.
    REQUIRE(eval(server, k_release_script, {"u"}) == "1");
    server.command({"CONFIG", "RESETSTAT"});
    REQUIRE(eval(server, k_acquire_script, {"v", "60000", "host", "h"}) == "3");
    CHECK(server.command({"INFO", "commandstats"}).find("cmdstat_del:") == std::string::npos);
}

TEST_CASE("a renewal that cuts the lease short says so on the channel, one that lengthens it "
          "does not") {
    RedisServer server;
    (void)publishes(server);
    server.command({"SET", "lock:x", "mine", "PX", "60000"});
    // A renewal: no channel, nothing said, whatever the ttl.
    CHECK(eval(server, k_renew_script, {"mine", "50000"}) == "1");
    CHECK(publishes(server) == 0);
    // Longer than what is left (extend to a longer lease), or another's token: nothing.
    CHECK(eval(server, k_renew_script, {"mine", "90000", "{lock:x}:released"}) == "1");
    CHECK(eval(server, k_renew_script, {"other", "1000", "{lock:x}:released"}) == "0");
    CHECK(publishes(server) == 0);
    CHECK(server.command({"GET", "lock:x"}) == "mine");
    // Shorter: the waiters are told.
    CHECK(eval(server, k_renew_script, {"mine", "1000", "{lock:x}:released"}) == "1");
    CHECK(publishes(server) == 1);
    CHECK(std::stoll(server.command({"PTTL", "lock:x"})) <= 1000);
    // A permit alike.
    server.command({"DEL", "lock:x"});
    REQUIRE(take(server, 1, "a") == "1");
    (void)publishes(server);
    using redlock::lock::k_renew_permit_script;
    CHECK(permit_call(server, k_renew_permit_script, 1, {"a", "90000", "{lock:x}:released"}) ==
          "1");
    CHECK(publishes(server) == 0);
    CHECK(permit_call(server, k_renew_permit_script, 1, {"a", "1000", "{lock:x}:released"}) == "1");
    CHECK(publishes(server) == 1);
}

namespace {
// The history script recording an entry of `fields` (field, value, ...) for lock:x, held
// `held_ms`, keeping `keep` entries (0: none, counters only), of a run that ended at `ended`
// (ms since the Unix epoch; "": when it arrives).
std::string record(const RedisServer& server, std::vector<std::string> fields,
                   const std::string& held_ms = "0", const std::string& keep = "10",
                   const std::string& ended = "") {
    std::string packed;
    for (const auto& f : fields)
        packed += f + '\0';
    return server.command({"EVAL", std::string(redlock::lock::k_history_script.source), "4",
                           "{lock:x}:history", "lock:x", "{lock:x}:meta", "{lock:x}:stats", "run",
                           "tok", keep, "60000", "0", held_ms, packed, ended});
}
std::string stat(const RedisServer& server, const std::string& field) {
    return server.command({"HGET", "{lock:x}:stats", field});
}
long long stat_ms(const RedisServer& server, const std::string& field) {
    return std::stoll(stat(server, field));
}
// The started_ms of the newest entry of lock:x's history.
long long newest_start(const RedisServer& server) {
    return std::stoll(
        server.command({"EVAL",
                        "local e = redis.call('xrevrange', KEYS[1], '+', '-', 'COUNT', 1)[1][2] "
                        "for i = 1, #e, 2 do if e[i] == 'started_ms' then return e[i + 1] end end",
                        "1", "{lock:x}:history"}));
}
} // namespace

TEST_CASE("the history script counts each entry by outcome, and a success only when it ran "
          "and exited 0") {
    RedisServer server;
    CHECK(record(server, {"run", "a", "outcome", "ran", "status", "0"}, "1500") == "1");
    CHECK(record(server, {"run", "b", "outcome", "ran", "status", "3"}, "7200000") == "1");
    CHECK(record(server, {"run", "c", "outcome", "skipped-held"}) == "1");
    CHECK(record(server, {"run", "d", "outcome", "lost", "status", "79"}, "100") == "1");
    CHECK(stat(server, "runs:ran") == "2");
    CHECK(stat(server, "runs:skipped-held") == "1");
    CHECK(stat(server, "runs:lost") == "1");
    // Three ran PROGRAM: 1.5 s (bucket 5), 2 h (bucket 7200), 0.1 s (bucket 1).
    CHECK(stat(server, "d:5") == "1");
    CHECK(stat(server, "d:7200") == "1");
    CHECK(stat(server, "d:1") == "1");
    CHECK(stat(server, "duration_ms") == "7201600");
    const std::string success = stat(server, "last_success_ms");
    CHECK(success != "(nil)");
    CHECK(stat(server, "last_run_ms") >= success);
    // A failure later moves the last run, never the last success.
    CHECK(record(server, {"run", "e", "outcome", "ran", "status", "1"}, "10") == "1");
    CHECK(stat(server, "last_success_ms") == success);
    // Kept for 400 days after the last entry.
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:stats"})) > 399LL * 86400 * 1000);
    CHECK(server.command({"XLEN", "{lock:x}:history"}) == "5");
}

TEST_CASE("with history = 0 the counters count and no entry is kept") {
    RedisServer server;
    CHECK(record(server, {"run", "a", "outcome", "ran", "status", "0", "slot_ms", "3600000"}, "5",
                 "0") == "1");
    CHECK(stat(server, "runs:ran") == "1");
    CHECK(stat(server, "slot_ms") == "3600000");
    CHECK(server.command({"EXISTS", "{lock:x}:history"}) == "0");
}

TEST_CASE("about one write in eight drops the entries older than the age, and only those") {
    RedisServer server;
    // Two entries from 1970 (their ids are ms since the epoch), and runs until a write
    // falls on a ms that trims (by the server's clock, a multiple of eight).
    server.command({"XADD", "{lock:x}:history", "1000-0", "outcome", "ran"});
    server.command({"XADD", "{lock:x}:history", "2000-0", "outcome", "ran"});
    auto oldest = [&] {
        return server.command({"XRANGE", "{lock:x}:history", "-", "+", "COUNT", "1"});
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    int written = 0;
    while (oldest().starts_with("[[1000-0") && std::chrono::steady_clock::now() < deadline) {
        // A new run id each time: one run's entry is recorded once.
        const std::string run = "r" + std::to_string(written);
        REQUIRE(record(server, {"run", run, "outcome", "ran", "status", "0"}, "10", "100000") ==
                "1");
        ++written;
    }
    CHECK_FALSE(oldest().starts_with("[[1000-0"));
    CHECK_FALSE(oldest().starts_with("[[2000-0"));
    CHECK(server.command({"XLEN", "{lock:x}:history"}) == std::to_string(written));
}

TEST_CASE("the history script's duration buckets are the exporter's") {
    std::string bounds;
    for (auto b : redlock::fleet::k_duration_buckets)
        bounds += (bounds.empty() ? "" : ", ") + std::to_string(b);
    CHECK(
        std::string_view(redlock::lock::k_history_script.source).find("ipairs({" + bounds + "})") !=
        std::string_view::npos);
}

TEST_CASE("the history's and the counters' expiry is pushed back once a sixteenth of the age "
          "has passed, not by every run") {
    RedisServer server;
    // The age is 60000 ms here: its stream expires 60000 + 3750 ms after a push.
    auto pttl = [&](const char* key) { return std::stoll(server.command({"PTTL", key})); };
    CHECK(record(server, {"run", "a", "outcome", "ran", "status", "0"}, "10") == "1");
    CHECK(pttl("{lock:x}:history") > 60000);
    CHECK(pttl("{lock:x}:stats") > 399LL * 86400 * 1000);
    const std::string pushed = stat(server, "refreshed_ms");
    CHECK(pushed != "(nil)");
    // Runs soon after: their entries and counters, no PEXPIRE.
    server.command({"CONFIG", "RESETSTAT"});
    CHECK(record(server, {"run", "b", "outcome", "ran", "status", "0"}, "10") == "1");
    CHECK(record(server, {"run", "c", "outcome", "lost", "status", "79"}, "10") == "1");
    CHECK(server.command({"INFO", "commandstats"}).find("cmdstat_pexpire:") == std::string::npos);
    CHECK(stat(server, "refreshed_ms") == pushed);
    CHECK(server.command({"XLEN", "{lock:x}:history"}) == "3");
    // A sixteenth of the age later (here: the last push set back by hand), both again.
    const auto before = std::stoll(pushed) - 3750;
    server.command({"HSET", "{lock:x}:stats", "refreshed_ms", std::to_string(before)});
    server.command({"PEXPIRE", "{lock:x}:history", "1000"});
    server.command({"PEXPIRE", "{lock:x}:stats", "1000"});
    CHECK(record(server, {"run", "d", "outcome", "ran", "status", "0"}, "10") == "1");
    CHECK(pttl("{lock:x}:history") > 60000);
    CHECK(pttl("{lock:x}:stats") > 399LL * 86400 * 1000);
    CHECK(std::stoll(stat(server, "refreshed_ms")) > before);
    // An entry that counts no run (a refusal, an interruption) always pushes them back.
    server.command({"PEXPIRE", "{lock:x}:history", "1000"});
    CHECK(record(server, {"run", "e", "outcome", "interrupted"}) == "1");
    CHECK(pttl("{lock:x}:history") > 60000);
    // A stream deleted by hand while the counters say "pushed just now" is one without a
    // TTL until the next push; with history = 0 every run pushes the counters back and
    // clears the mark, so that a stream kept again gets its TTL with its first entry.
    CHECK(record(server, {"run", "f", "outcome", "ran", "status", "0"}, "10", "0") == "1");
    CHECK(stat(server, "refreshed_ms") == "0");
    server.command({"DEL", "{lock:x}:history"});
    CHECK(record(server, {"run", "g", "outcome", "ran", "status", "0"}, "10") == "1");
    CHECK(pttl("{lock:x}:history") > 60000);
}

TEST_CASE("a run's entry sent twice is recorded once, in the history and the counters") {
    RedisServer server;
    // The run's own release, then its releaser's (redlock killed while it waited): the same
    // run id, whatever the second says of it.
    CHECK(record(server, {"run", "a", "outcome", "ran", "status", "0"}, "1500") == "1");
    CHECK(record(server, {"run", "a", "outcome", "ran", "status", "0"}, "1700") == "0");
    CHECK(record(server, {"run", "b", "outcome", "failed", "status", "127"}) == "1");
    CHECK(record(server, {"run", "b", "outcome", "killed"}) == "0");
    CHECK(server.command({"XLEN", "{lock:x}:history"}) == "2");
    CHECK(stat(server, "runs:ran") == "1");
    CHECK(stat(server, "d:5") == "1");
    CHECK(stat(server, "duration_ms") == "1500");
    CHECK(stat(server, "runs:failed") == "1");
    CHECK(stat(server, "runs:killed") == "(nil)");
    CHECK(stat(server, "recorded") == "b a");
    // With history = 0 too: the counters count it once.
    CHECK(record(server, {"run", "c", "outcome", "ran", "status", "0"}, "10", "0") == "1");
    CHECK(record(server, {"run", "c", "outcome", "ran", "status", "0"}, "10", "0") == "0");
    CHECK(stat(server, "runs:ran") == "2");
    // The ids of the last five entries are kept, no more, and of each its first 12 digits:
    // the hash stays a listpack (a ziplist before Redis 7).
    for (const char* run : {"d00000000000000d", "e00000000000000e", "f00000000000000f",
                            "a00000000000000a", "b00000000000000b"})
        CHECK(record(server, {"run", run, "outcome", "ran", "status", "0"}) == "1");
    CHECK(stat(server, "recorded") ==
          "b00000000000 a00000000000 f00000000000 e00000000000 d00000000000");
    const auto encoding = server.command({"OBJECT", "ENCODING", "{lock:x}:stats"});
    CHECK((encoding == "listpack" || encoding == "ziplist"));
    CHECK(record(server, {"run", "a00000000000000a", "outcome", "ran", "status", "0"}) == "0");
    CHECK(record(server, {"run", "c", "outcome", "ran", "status", "0"}) == "1");
    CHECK(stat(server, "runs:ran") == "8");
}

TEST_CASE("an entry that arrives late says when its run ended, and moves no last run or "
          "success back") {
    RedisServer server;
    // A run that ended a minute ago, whose release this server gets only now (it was frozen).
    const long long ended = server_ms(server) - 60000;
    CHECK(record(server, {"run", "a", "outcome", "ran", "status", "0"}, "1500", "10",
                 std::to_string(ended)) == "1");
    CHECK(newest_start(server) == ended - 1500);
    CHECK(stat_ms(server, "last_run_ms") == ended);
    CHECK(stat_ms(server, "last_success_ms") == ended);
    // An earlier run's entry that arrives after it has its own times, and moves neither back.
    CHECK(record(server, {"run", "b", "outcome", "ran", "status", "0"}, "10", "10",
                 std::to_string(ended - 5000)) == "1");
    CHECK(newest_start(server) == ended - 5010);
    CHECK(stat_ms(server, "last_run_ms") == ended);
    CHECK(stat_ms(server, "last_success_ms") == ended);
    // A later failure moves the last run only.
    CHECK(record(server, {"run", "c", "outcome", "ran", "status", "1"}, "10", "10",
                 std::to_string(ended + 1000)) == "1");
    CHECK(stat_ms(server, "last_run_ms") == ended + 1000);
    CHECK(stat_ms(server, "last_success_ms") == ended);
    // An end in the server's future (a host clock ahead), or one that is not a time, is the
    // server's TIME on arrival.
    for (const std::string& bad :
         std::vector<std::string>{std::to_string(server_ms(server) + 3600000), "banana", "-5"}) {
        const long long before = server_ms(server);
        CHECK(record(server, {"run", "d" + bad, "outcome", "ran", "status", "0"}, "10", "10",
                     bad) == "1");
        const long long after = server_ms(server);
        CHECK(stat_ms(server, "last_success_ms") >= before);
        CHECK(stat_ms(server, "last_success_ms") <= after);
        CHECK(newest_start(server) >= before - 10);
        CHECK(newest_start(server) <= after - 10);
    }
    // A last success past the server's TIME is no time a run ended (the clock was stepped
    // back, or someone wrote it): a run's end replaces it.
    server.command({"HSET", "{lock:x}:stats", "last_success_ms",
                    std::to_string(server_ms(server) + 86400000)});
    const long long now = server_ms(server) - 1000;
    CHECK(record(server, {"run", "e", "outcome", "ran", "status", "0"}, "10", "10",
                 std::to_string(now)) == "1");
    CHECK(stat_ms(server, "last_success_ms") == now);
}
