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
#include "lock/cron_scripts.hpp"
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

const std::array<std::pair<std::string_view, const Script*>, 18> k_every_script{{
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
    {"cron claim", &redlock::lock::k_cron_claim_script},
    {"cron yield", &redlock::lock::k_cron_yield_script},
    {"cron finish", &redlock::lock::k_cron_finish_script},
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

namespace {
// Values joined by NULs: a list as the record stores it (lock/scripts.hpp, k_blob).
std::string joined(std::initializer_list<std::string_view> values) {
    std::string out;
    bool first = true;
    for (auto v : values) {
        if (!first)
            out.push_back('\0');
        first = false;
        out.append(v);
    }
    return out;
}
// The list the record {lock:x}:fence keeps under `name` (its pieces joined), split at NULs;
// empty when there is none.
std::vector<std::string> record_list(const RedisServer& server, const std::string& name) {
    std::string text;
    for (const auto& piece : {name, name + ":2", name + ":3", name + ":4"}) {
        auto got = server.command({"HGET", "{lock:x}:fence", piece});
        if (got == "(nil)" || got.empty())
            break;
        text += got;
    }
    std::vector<std::string> out;
    if (text.empty())
        return out;
    size_t start = 0;
    for (size_t nul = text.find('\0'); nul != std::string::npos; nul = text.find('\0', start)) {
        out.push_back(text.substr(start, nul - start));
        start = nul + 1;
    }
    out.push_back(text.substr(start));
    return out;
}
std::string inspect(const RedisServer& server, std::initializer_list<std::string> args) {
    std::vector<std::string> argv{
        "EVAL",          std::string(k_inspect_script.source), "3", "lock:x", "{lock:x}:meta",
        "{lock:x}:fence"};
    argv.insert(argv.end(), args);
    return server.command(argv);
}
} // namespace

TEST_CASE("the inspect script reports a free lock as nil, -2 and no metadata") {
    RedisServer server;
    CHECK(inspect(server, {"f"}) == "[(nil), -2, [], (nil), []]");
    server.command({"SET", "lock:x", "tok", "PX", "60000"});
    server.command({"HSET", "{lock:x}:meta", "token", "tok"});
    server.command({"HSET", "{lock:x}:fence", "f", "7", "f2", "9"});
    auto held = inspect(server, {"f"});
    CHECK(held.starts_with("[tok, "));
    CHECK(held.ends_with(", [token, tok], 7, []]"));
    // A permit's counter is its own field.
    CHECK(inspect(server, {"f2"}).ends_with(", [token, tok], 9, []]"));
    // With "slot", the --once-per record too, its run's id as the token.
    server.command(
        {"HSET", "{lock:x}:fence", "s", joined({"3", "3600000", "r1", "5", "", "", "", "h"})});
    CHECK(inspect(server, {"f", "slot"})
              .ends_with(", [token, tok], 7, [slot, 3, slot_ms, 3600000, token, r1, started_ms, "
                         "5, host, h]]"));
    // 0.4's counter, a string, is read as it is.
    server.command({"DEL", "{lock:x}:fence"});
    server.command({"SET", "{lock:x}:fence", "41"});
    CHECK(inspect(server, {"f", "slot"}).ends_with(", [token, tok], 41, []]"));
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
    many[1] = "{lock:x}:fence";
    server.command(many);
    server.command({"HSET", "{lock:x}:fence", "s",
                    joined({"3", "", "", "", "", "", "", std::string(5000, 'w')})});
    const auto held = inspect(server, {"f", "slot"});
    CHECK(held.ends_with(", [token, tok, host, " + std::string(4096, 'h') + "], (nil), [slot, 3, " +
                         "host, " + std::string(4096, 'w') + "]]"));
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
// --once-per's claim of a slot of `length` ms (early: 0) by the holder of token `token`, for
// the run `run` (named as the token by default), the record kept 60 s.
std::string claim(const RedisServer& server, const std::string& token, const std::string& length,
                  const std::string& early = "0", std::string run = {}) {
    if (run.empty())
        run = token;
    return server.command({"EVAL", std::string(redlock::lock::k_claim_slot_script.source), "3",
                           "lock:x", "{lock:x}:fence", "{lock:x}:slot", token, length, early,
                           "60000", run, "host", "h"});
}
long long server_ms(const RedisServer& server) {
    auto t = server.command({"TIME"}); // "[seconds, microseconds]"
    auto comma = t.find(',');
    return std::stoll(t.substr(1, comma - 1)) * 1000 + std::stoll(t.substr(comma + 2)) / 1000;
}
// The --once-per record's value of `field` ("" when it has none).
std::string slot_value(const RedisServer& server, const std::string& field) {
    static const std::vector<std::string> fields{"slot",     "slot_ms", "run",         "started_ms",
                                                 "ended_ms", "status",  "start_error", "host",
                                                 "pid",      "user",    "command"};
    const auto values = record_list(server, "s");
    const auto at = std::ranges::find(fields, field) - fields.begin();
    return static_cast<size_t>(at) < values.size() ? values[static_cast<size_t>(at)] : "";
}
} // namespace

TEST_CASE("a slot is claimed once, only by the lock's holder, and its record outlives it") {
    RedisServer server;
    CHECK(claim(server, "t1", "3600000") == "0"); // not holding the lock
    server.command({"SET", "lock:x", "t1", "PX", "60000"});
    const long long before = server_ms(server);
    CHECK(claim(server, "t1", "3600000") == "1");
    const long long after = server_ms(server);
    CHECK(slot_value(server, "host") == "h");
    const long long slot = std::stoll(slot_value(server, "slot"));
    CHECK(slot >= before / 3600000);
    CHECK(slot <= after / 3600000);
    // The record is kept two slots from now: past the whole slot after its own.
    auto pttl = std::stoll(server.command({"PTTL", "{lock:x}:fence"}));
    CHECK(pttl > 2 * 3600000 - 10000);
    CHECK(pttl <= 2 * 3600000);
    // Run again (the same holder, or the next one): the slot is done.
    CHECK(claim(server, "t1", "3600000") == "-1");
    server.command({"SET", "lock:x", "t2", "PX", "60000"});
    CHECK(claim(server, "t2", "3600000") == "-1");
    // A record of a later slot (a server whose clock went back) refuses too.
    server.command({"HSET", "{lock:x}:fence", "s", joined({std::to_string(slot + 5)})});
    CHECK(claim(server, "t2", "3600000") == "-1");
    // A record that is not one (garbage) does not block the slot forever.
    server.command({"HSET", "{lock:x}:fence", "s", "soon"});
    CHECK(claim(server, "t2", "3600000") == "1");
    CHECK(slot_value(server, "run") == "t2");
    // A short slot is kept the history's age (a minute here) and a sixteenth.
    server.command({"DEL", "{lock:x}:fence"});
    CHECK(claim(server, "t2", "1000") == "1");
    pttl = std::stoll(server.command({"PTTL", "{lock:x}:fence"}));
    CHECK(pttl > 60000);
    CHECK(pttl <= 63750);
}

TEST_CASE("a slot 0.4 recorded is not claimed again") {
    RedisServer server;
    server.command({"SET", "lock:x", "t1", "PX", "60000"});
    const long long slot = server_ms(server) / 3600000;
    server.command({"HSET", "{lock:x}:slot", "slot", std::to_string(slot), "token", "old"});
    CHECK(claim(server, "t1", "3600000") == "-1");
    // Given back (its PROGRAM could not start): claimed, and the record is ours from then on.
    server.command({"HSET", "{lock:x}:slot", "start_error", "cannot run"});
    CHECK(claim(server, "t1", "3600000") == "1");
    CHECK(slot_value(server, "run") == "t1");
    server.command({"DEL", "{lock:x}:slot"});
    CHECK(claim(server, "t1", "3600000") == "-1");
}

TEST_CASE("a run starting just before its slot counts for that slot") {
    RedisServer server;
    server.command({"SET", "lock:x", "t1", "PX", "60000"});
    // A whole slot early: counted for the slot after the one the server's clock is in.
    const long long before = server_ms(server);
    CHECK(claim(server, "t1", "1000", "1000") == "1");
    const long long after = server_ms(server);
    const long long slot = std::stoll(slot_value(server, "slot"));
    CHECK(slot >= before / 1000 + 1);
    CHECK(slot <= after / 1000 + 1);
}

namespace {
std::string finish(const RedisServer& server, const std::string& run, const std::string& status,
                   std::optional<std::string> error = std::nullopt) {
    std::vector<std::string> argv{"EVAL",  std::string(redlock::lock::k_finish_slot_script.source),
                                  "1",     "{lock:x}:fence",
                                  run,     status,
                                  "60000", "1000"};
    if (error)
        argv.push_back(*error);
    return server.command(argv);
}
} // namespace

TEST_CASE("the end of a run is recorded only in its own slot record") {
    RedisServer server;
    server.command({"SET", "lock:x", "t1", "PX", "60000"});
    REQUIRE(claim(server, "t1", "1000", "0", "run-1") == "1");
    CHECK(finish(server, "someone-else", "3") == "0");
    CHECK(slot_value(server, "status").empty());
    CHECK(finish(server, "run-1", "3") == "1");
    CHECK(slot_value(server, "status") == "3");
    CHECK(std::stoll(slot_value(server, "ended_ms")) >=
          std::stoll(slot_value(server, "started_ms")));
    CHECK(slot_value(server, "host") == "h");
    // Kept from the end on.
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:fence"})) > 60000);
}

TEST_CASE("a run whose program could not start gives its slot back, and says why") {
    RedisServer server;
    server.command({"SET", "lock:x", "t1", "PX", "60000"});
    REQUIRE(claim(server, "t1", "3600000") == "1");
    CHECK(finish(server, "t1", "127", "cannot run 'x': No such file or directory") == "1");
    CHECK(slot_value(server, "start_error") == "cannot run 'x': No such file or directory");
    CHECK(slot_value(server, "status") == "127");
    // The slot is open: the next holder claims it, and its record replaces the failed one.
    server.command({"SET", "lock:x", "t2", "PX", "60000"});
    CHECK(claim(server, "t2", "3600000") == "1");
    CHECK(slot_value(server, "run") == "t2");
    CHECK(slot_value(server, "start_error").empty());
    CHECK(claim(server, "t2", "3600000") == "-1");
    // A failed start gives back its own slot only, never an earlier one (the record stays
    // a max-register of slots).
    const long long slot = std::stoll(slot_value(server, "slot"));
    server.command({"HSET", "{lock:x}:fence", "s",
                    joined({std::to_string(slot + 1), "3600000", "t3", "", "", "", "cannot run"})});
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
// The acquire script's attempt with `token` (and the holder's fields `holder`): a 60 s lease,
// the record kept the history's age of 60 s, the fence in "f".
std::string acquire(const RedisServer& server, const std::string& token,
                    std::initializer_list<std::string> holder = {}) {
    std::vector<std::string> argv{"EVAL",
                                  std::string(k_acquire_script.source),
                                  "3",
                                  "lock:x",
                                  "{lock:x}:meta",
                                  "{lock:x}:fence",
                                  token,
                                  "60000",
                                  "60000",
                                  "0",
                                  "f"};
    argv.insert(argv.end(), holder);
    return server.command(argv);
}
long long server_us(const RedisServer& server) {
    auto t = server.command({"TIME"});
    auto comma = t.find(',');
    return std::stoll(t.substr(1, comma - 1)) * 1000000 + std::stoll(t.substr(comma + 2));
}

// An acquire script's "held" reply carries the holder's PTTL: -2 - PTTL.
bool held_with_pttl_near(const std::string& reply, long long pttl) {
    long long held = redlock::lock::held_pttl(std::stoll(reply));
    return held <= pttl && held > pttl - 10000;
}
} // namespace

TEST_CASE("the acquire script increments the fence only when it acquires, from the server's "
          "clock when there is no counter") {
    RedisServer server;
    const long long before = server_us(server);
    const long long first = std::stoll(acquire(server, "t1", {"host", "h"}));
    const long long after = server_us(server);
    CHECK(first >= before);
    CHECK(first <= after);
    CHECK(held_with_pttl_near(acquire(server, "t2"), 60000));
    CHECK(server.command({"HGET", "{lock:x}:fence", "f"}) == std::to_string(first));
    CHECK(server.command({"HGET", "{lock:x}:meta", "fence"}) == std::to_string(first));
    server.command({"DEL", "lock:x"});
    CHECK(acquire(server, "t3") == std::to_string(first + 1));
    // The record expires the history's age (60 s here) and a sixteenth after the last fence.
    const auto pttl = std::stoll(server.command({"PTTL", "{lock:x}:fence"}));
    CHECK(pttl > 60000);
    CHECK(pttl <= 63750);
    // A counter that is there goes on from where it is.
    server.command({"DEL", "lock:x"});
    server.command({"HSET", "{lock:x}:fence", "f", "41"});
    CHECK(acquire(server, "t4") == "42");
    CHECK(held_with_pttl_near(acquire(server, "t5"), 60000));
    CHECK(server.command({"HGET", "{lock:x}:fence", "f"}) == "42");
    // A key some other client set with no expiry: PTTL -1, so -1.
    server.command({"SET", "lock:x", "foreign"});
    CHECK(acquire(server, "t6") == "-1");
    CHECK(acquire(server, "t6") == "-1");
}

TEST_CASE("a fence given after the record expired is larger than every fence before") {
    RedisServer server;
    const long long first = std::stoll(acquire(server, "t1"));
    server.command({"DEL", "lock:x"});
    const long long second = std::stoll(acquire(server, "t2"));
    CHECK(second == first + 1);
    // The record's TTL runs out (the name unused for the history's age): the next counter
    // starts from the clock, which has moved on.
    server.command({"DEL", "lock:x", "{lock:x}:fence"});
    const long long third = std::stoll(acquire(server, "t3"));
    CHECK(third > second);
    // Even where the record held many more fences than microseconds went by: the largest
    // of the two.
    server.command({"DEL", "lock:x"});
    server.command({"HSET", "{lock:x}:fence", "f", std::to_string(third + 100000000)});
    CHECK(acquire(server, "t4") == std::to_string(third + 100000001));
}

TEST_CASE("a 0.4 counter becomes the record's, and goes on from where it was") {
    RedisServer server;
    server.command({"SET", "{lock:x}:fence", "41"});
    CHECK(acquire(server, "t1") == "42");
    CHECK(server.command({"TYPE", "{lock:x}:fence"}) == "hash");
    CHECK(server.command({"HGET", "{lock:x}:fence", "f"}) == "42");
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:fence"})) > 60000);
    // A 0.4 host's INCR now meets a hash: it fails, and gives no fence.
    CHECK(server.command({"INCR", "{lock:x}:fence"}).starts_with("(error) WRONGTYPE"));
}

TEST_CASE("a permit's 0.4 counter is taken over, past whatever it gave") {
    RedisServer server;
    // A counter far past the clock: the permit's fence goes on from it.
    server.command({"SET", "{lock:x}:permit:2:fence", "8000000000000000"});
    const std::vector<std::string> permit{"{lock:x}:permit:2", "{lock:x}:permit:2:meta",
                                          "{lock:x}:fence",    "lock:x",
                                          "{lock:x}:limit",    "{lock:x}:permit:2:fence"};
    std::vector<std::string> argv{"EVAL",
                                  std::string(redlock::lock::k_acquire_permit_script.source), "6"};
    argv.insert(argv.end(), permit.begin(), permit.end());
    argv.insert(argv.end(), {"a", "60000", "60000", "0", "f2", "3"});
    CHECK(server.command(argv) == "8000000000000001");
    CHECK(server.command({"EXISTS", "{lock:x}:permit:2:fence"}) == "0");
    CHECK(server.command({"HGET", "{lock:x}:fence", "f2"}) == "8000000000000001");
}

namespace {
// The acquire scripts with --fair's queue: token, ticket, a 3 s drop.
// An attempt with lock token `token` by the waiter `waiter` (its place in the queue; by
// default named as the token).
std::string fair(const RedisServer& server, const Script& script, const std::string& token,
                 const std::string& ticket, std::string waiter = {}) {
    if (waiter.empty())
        waiter = token;
    return server.command({"EVAL", std::string(script.source), "5", "lock:x", "{lock:x}:meta",
                           "{lock:x}:fence", "{lock:x}:queue", "{lock:x}:waiting", token, "60000",
                           "60000", "0", "f", ticket, "3000", waiter, "{lock:x}:w:"});
}
} // namespace

TEST_CASE("the queue's keys expire ten drops after the last attempt, renewed by one PTTL, "
          "not two PEXPIREs, while most of it is left") {
    RedisServer server;
    server.command({"SET", "lock:x", "holder", "PX", "60000"});
    auto pttl = [&](const char* key) { return std::stoll(server.command({"PTTL", key})); };
    CHECK(held_with_pttl_near(fair(server, k_acquire_script, "a", "1"), 9000));
    for (const char* key : {"{lock:x}:queue", "{lock:x}:waiting"}) {
        CAPTURE(key);
        CHECK(pttl(key) > 29000);
        CHECK(pttl(key) <= 30000);
    }
    // A newcomer joins the queue: nothing is renewed, and no ticket counter is kept.
    server.command({"CONFIG", "RESETSTAT"});
    CHECK(held_with_pttl_near(fair(server, k_acquire_script, "b", "5"), 12000));
    CHECK(server.command({"INFO", "commandstats"}).find("cmdstat_pexpire:") == std::string::npos);
    CHECK(server.command({"KEYS", "*tickets*"}) == "[]");
    // Less than nine drops left: the next attempt renews both.
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
        server.command({"DEL", "lock:x"});
        // Free, but "first" is ahead and alive: not "second"'s turn. It is told the lock is
        // held until "first" could be dropped (3 s of silence), not that it is free.
        const auto wait =
            redlock::lock::held_pttl(std::stoll(fair(server, *script, "second", "2")));
        CHECK(wait > 2000);
        CHECK(wait <= 3000);
        CHECK(fair(server, *script, "first", "1") != "0");
        CHECK(server.command({"ZRANGE", "{lock:x}:queue", "0", "-1"}) == "[second]");
        CHECK(server.command({"ZSCORE", "{lock:x}:waiting", "first"}) == "(nil)");
        auto keep = std::stoll(server.command({"PTTL", "{lock:x}:queue"}));
        CHECK((keep > 0 && keep <= 30000));
        // The last waiter leaves the queue with nothing of it behind.
        server.command({"DEL", "lock:x"});
        CHECK(fair(server, *script, "second", "2") != "0");
        CHECK(server.command({"EXISTS", "{lock:x}:queue", "{lock:x}:waiting"}) == "0");
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
    // Free: the head takes it with no enrolment, no renewal of the queue, and leaves. (The
    // fence from the clock: the first of the name.)
    server.command({"DEL", "lock:x"});
    server.command({"CONFIG", "RESETSTAT"});
    CHECK(fair(server, k_acquire_script, "head", "1") != "0");
    auto stats = server.command({"INFO", "commandstats"});
    CHECK(stats.find("cmdstat_zadd:") == std::string::npos);
    CHECK(stats.find("cmdstat_zrange:calls=1,") != std::string::npos);
    CHECK(stats.find("cmdstat_pttl:calls=1,") != std::string::npos); // the lock's alone
    CHECK(server.command({"ZRANGE", "{lock:x}:queue", "0", "-1"}) == "[next]");
    CHECK(server.command({"ZSCORE", "{lock:x}:waiting", "head"}) == "(nil)");
    // The next head: its fence from the counter, and no TIME at all.
    server.command({"DEL", "lock:x"});
    server.command({"CONFIG", "RESETSTAT"});
    CHECK(fair(server, k_acquire_script, "next", "2") != "0");
    stats = server.command({"INFO", "commandstats"});
    CHECK(stats.find("cmdstat_time:") == std::string::npos);
    // A newcomer behind a live head: the one look at the head serves the whole attempt.
    server.command({"SET", "lock:x", "holder", "PX", "60000"});
    CHECK(held_with_pttl_near(fair(server, k_acquire_script, "head2", "3"), 9000));
    server.command({"CONFIG", "RESETSTAT"});
    CHECK(redlock::lock::held_pttl(std::stoll(fair(server, k_acquire_script, "late", "4"))) > 2000);
    CHECK(server.command({"INFO", "commandstats"}).find("cmdstat_zrange:calls=1,") !=
          std::string::npos);
    CHECK(server.command({"ZRANGE", "{lock:x}:queue", "0", "-1"}) == "[head2, late]");
}

TEST_CASE("a silent waiter at the head of the queue is dropped") {
    RedisServer server;
    server.command({"ZADD", "{lock:x}:queue", "1", "dead"});
    server.command({"ZADD", "{lock:x}:waiting", "1000", "dead"}); // its last attempt: 1970
    CHECK(fair(server, k_acquire_script, "alive", "2") != "0");
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
        CHECK(fair(server, *script, "alive", "2") != "0");
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
    auto raise = [&](const std::string& token, const std::string& fence) {
        return eval(server, k_fence_script, {token, fence, "f", "60000", "0"});
    };
    CHECK(raise("other", "5") == "0");
    CHECK(server.command({"EXISTS", "{lock:x}:fence"}) == "0");
    CHECK(raise("mine", "5") == "1");
    CHECK(server.command({"HGET", "{lock:x}:fence", "f"}) == "5");
    CHECK(server.command({"HGET", "{lock:x}:meta", "fence"}) == "5");
    // The record, new or not, lives the history's age from the fence on.
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:fence"})) > 60000);
    CHECK(raise("mine", "3") == "0");
    CHECK(server.command({"HGET", "{lock:x}:fence", "f"}) == "5");
    // No metadata hash: none is created (it would have no TTL).
    server.command({"DEL", "{lock:x}:meta"});
    CHECK(raise("mine", "6") == "1");
    CHECK(server.command({"EXISTS", "{lock:x}:meta"}) == "0");
    // A counter that is not a number: an error, nothing written.
    server.command({"HSET", "{lock:x}:fence", "f", "banana"});
    CHECK(raise("mine", "7").find("is not a number") != std::string::npos);
    CHECK(server.command({"HGET", "{lock:x}:fence", "f"}) == "banana");
}

TEST_CASE("a fence counter that is not a number is an error, never read as zero") {
    RedisServer server;
    // Lua's tonumber() takes all but the first; HINCRBY none of them, and a negative counter
    // would give fences below 1. Nor 2^53 and above: Lua's numbers are exact below it.
    for (const char* bad : {"garbage", "007", "-5", "5.0", "1e3", "+5", " 5", "9007199254740991",
                            "1000000000000000000", "9223372036854775807"}) {
        CAPTURE(bad);
        server.command({"HSET", "{lock:x}:fence", "f", bad});
        CHECK(acquire(server, "t1").find("is not a number") != std::string::npos);
        CHECK(acquire(server, "t1").find("is not a number") != std::string::npos);
        CHECK(server.command({"EXISTS", "lock:x"}) == "0");
        CHECK(server.command({"HGET", "{lock:x}:fence", "f"}) == bad);
    }
    // 0.4's counter the same, as a string.
    for (const char* bad : {"garbage", "007", "-5", "1000000000000000000"}) {
        CAPTURE(bad);
        server.command({"DEL", "{lock:x}:fence"});
        server.command({"SET", "{lock:x}:fence", bad});
        CHECK(acquire(server, "t1").find("is not a number") != std::string::npos);
        CHECK(server.command({"EXISTS", "lock:x"}) == "0");
        CHECK(server.command({"GET", "{lock:x}:fence"}) == bad);
    }
    // Another type: the error as it came, nothing written.
    server.command({"DEL", "{lock:x}:fence"});
    server.command({"RPUSH", "{lock:x}:fence", "a"});
    CHECK(acquire(server, "t1").find("WRONGTYPE") != std::string::npos);
    CHECK(server.command({"EXISTS", "lock:x"}) == "0");
}

TEST_CASE("a won attempt takes its fence with one HINCRBY, and reads no counter first") {
    RedisServer server;
    server.command({"HSET", "{lock:x}:fence", "f", "41"});
    server.command({"CONFIG", "RESETSTAT"});
    REQUIRE(acquire(server, "t1", {"host", "h"}) == "42");
    const auto stats = server.command({"INFO", "commandstats"});
    CHECK(stats.find("cmdstat_get:") == std::string::npos);
    CHECK(stats.find("cmdstat_time:") == std::string::npos);
    CHECK(stats.find("cmdstat_hincrby:calls=1,") != std::string::npos);
    CHECK(stats.find("cmdstat_pexpire:calls=2,") != std::string::npos); // the record's, the meta's
    CHECK(server.command({"HGET", "{lock:x}:meta", "fence"}) == "42");
}

namespace {
// A --limit script on permit `permit` of lock:x (its keys: the permit, its metadata, the
// name's record, lock, limit, and the permit's 0.4 counter).
std::string permit_call(const RedisServer& server, const Script& script, int permit,
                        std::vector<std::string> args) {
    const auto base = "{lock:x}:permit:" + std::to_string(permit);
    std::vector<std::string> argv{
        "EVAL",         std::string(script.source), "6",      base,
        base + ":meta", "{lock:x}:fence",           "lock:x", "{lock:x}:limit",
        base + ":fence"};
    argv.insert(argv.end(), args.begin(), args.end());
    return server.command(argv);
}
// The acquisition of permit `permit` of `limit` with `token` and a lease of `ttl` ms.
std::string take(const RedisServer& server, int permit, const std::string& token,
                 const std::string& limit = "3", const std::string& ttl = "60000") {
    return permit_call(
        server, redlock::lock::k_acquire_permit_script, permit,
        {token, ttl, "60000", "0", "f" + std::to_string(permit), limit, "host", "h"});
}
// Whether a reply is a fence: a whole number, 1 or more.
bool is_fence(const std::string& reply) {
    return !reply.empty() && reply.find_first_not_of("0123456789") == std::string::npos &&
           std::stoll(reply) >= 1;
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
    const auto a = take(server, 1, "a"); // its own fence, from the clock: the permit's first
    CHECK(is_fence(a));
    CHECK(is_fence(take(server, 2, "b")));
    CHECK(held_with_pttl_near(take(server, 1, "c"), 60000));
    CHECK(server.command({"TYPE", "lock:x"}) == "zset");
    CHECK(server.command({"ZRANGE", "lock:x", "0", "-1"}) == "[a, b]");
    CHECK(server.command({"GET", "{lock:x}:limit"}) == "3");
    CHECK(server.command({"HGET", "{lock:x}:permit:1:meta", "fence"}) == a);
    CHECK(server.command({"HGET", "{lock:x}:fence", "f1"}) == a);
    // The set's expiry: the end of the sixteenth of b's lease in which b's lease ends.
    auto pttl = std::stoll(server.command({"PTTL", "lock:x"}));
    CHECK(pttl > 50000);
    CHECK(pttl <= 60000 + 60000 / 16);
    check_limit_expires_with_the_set(server);
    // The permit's counter goes on in the name's record, which the history's age keeps.
    REQUIRE(permit_call(server, redlock::lock::k_release_permit_script, 1, {"a"}) == "1");
    CHECK(take(server, 1, "d") == std::to_string(std::stoll(a) + 1));
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:fence"})) > 60000);
    // A plain lock's SET NX finds the name taken.
    CHECK(server.command({"SET", "lock:x", "plain", "NX", "PX", "1000"}) == "(nil)");
}

TEST_CASE("holders with another limit refuse a permit, until none is left") {
    RedisServer server;
    REQUIRE(is_fence(take(server, 1, "a")));
    CHECK(take(server, 2, "b", "5") == "(error) LIMIT 3");
    CHECK(take(server, 2, "b", "2") == "(error) LIMIT 3");
    // An expired holder (its lease over by the server's clock) is dropped, and counts no more.
    server.command({"ZADD", "lock:x", "1", "a"});
    CHECK(is_fence(take(server, 2, "b", "5")));
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
    REQUIRE(is_fence(take(server, 1, "a", "2")));
    // One permit of two free: a held one says only its own PTTL.
    const auto one = std::stoll(take(server, 1, "b", "2"));
    CHECK_FALSE(every_permit_held(one));
    REQUIRE(is_fence(take(server, 2, "b", "2")));
    // Both held: whichever is asked, "every permit held", with the first lease's end.
    const auto base = std::string("{lock:x}:permit:1");
    auto waiter = [&](const std::string& token, const std::string& listed) {
        return server.command({"EVAL",
                               std::string(k_acquire_permit_script.source),
                               "7",
                               base,
                               base + ":meta",
                               "{lock:x}:fence",
                               "lock:x",
                               "{lock:x}:limit",
                               base + ":fence",
                               "{lock:x}:waiters",
                               token,
                               "60000",
                               "60000",
                               "0",
                               "f1",
                               "2",
                               "1000",
                               listed,
                               "w1",
                               "host",
                               "h"});
    };
    const auto all = std::stoll(waiter("c", "0"));
    CHECK(every_permit_held(all));
    CHECK(held_pttl(all) > 50000);
    CHECK(held_pttl(all) <= 60000);
    CHECK(server.command({"ZRANGE", "{lock:x}:waiters", "0", "-1", "WITHSCORES"}) == "[w1, 1000]");
    // A release frees permit 1: the waiter takes it and leaves the wait list.
    using redlock::lock::k_release_permit_script;
    REQUIRE(permit_call(server, k_release_permit_script, 1, {"a"}) == "1");
    CHECK(is_fence(waiter("c", "1")));
    CHECK(server.command({"EXISTS", "{lock:x}:waiters"}) == "0");
    CHECK(server.command({"HGET", "{lock:x}:permit:1:meta", "host"}) == "h");
}

TEST_CASE("a permit's fence counter that is not a number is an error, and nothing is taken") {
    RedisServer server;
    for (const char* bad : {"banana", "-5", "9007199254740992"}) {
        CAPTURE(bad);
        server.command({"HSET", "{lock:x}:fence", "f1", bad});
        CHECK(take(server, 1, "a").find("is not a number") != std::string::npos);
        CHECK(server.command({"EXISTS", "{lock:x}:permit:1", "lock:x", "{lock:x}:limit",
                              "{lock:x}:permit:1:meta"}) == "0");
        CHECK(server.command({"HGET", "{lock:x}:fence", "f1"}) == bad);
    }
    // Nor a 0.4 counter that is not one: it stays, and nothing is written.
    server.command({"DEL", "{lock:x}:fence"});
    server.command({"SET", "{lock:x}:permit:1:fence", "banana"});
    CHECK(take(server, 1, "a").find("is not a number") != std::string::npos);
    CHECK(server.command({"EXISTS", "{lock:x}:permit:1", "lock:x", "{lock:x}:fence"}) == "0");
    CHECK(server.command({"GET", "{lock:x}:permit:1:fence"}) == "banana");
    // Other permits are not held up by it.
    CHECK(is_fence(take(server, 2, "a")));
}

TEST_CASE("a permit's release wakes the --fair queue only when it leaves the name free") {
    RedisServer server;
    REQUIRE(is_fence(take(server, 1, "a", "2")));
    REQUIRE(is_fence(take(server, 2, "b", "2")));
    auto release = [&](int permit, const std::string& token) {
        const auto base = "{lock:x}:permit:" + std::to_string(permit);
        return server.command({"EVAL", std::string(redlock::lock::k_release_permit_script.source),
                               "7", base, base + ":meta", "{lock:x}:fence", "lock:x",
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
    REQUIRE(is_fence(take(server, 1, "a")));
    REQUIRE(is_fence(take(server, 2, "b")));
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
    REQUIRE(is_fence(take(server, 1, "c", "3", "20000")));
    CHECK(std::stoll(server.command({"PTTL", "lock:x"})) <= 20000);
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:limit"})) <= 20000);
    REQUIRE(is_fence(take(server, 2, "d")));
    CHECK(std::stoll(server.command({"PTTL", "lock:x"})) > 50000);
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:limit"})) > 50000);
    REQUIRE(is_fence(take(server, 3, "e", "3", "10000")));
    CHECK(std::stoll(server.command({"PTTL", "lock:x"})) > 50000);
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:limit"})) > 50000);
}

TEST_CASE("acquisitions within a sixteenth of a lease move the set's expiry once, and the "
          "limit's with it") {
    RedisServer server;
    REQUIRE(is_fence(take(server, 1, "a")));
    // Holders, and a set's expiry that ends a sixteenth: the next acquisitions (well within
    // that sixteenth: its end is an hour away) need not move it.
    const long long until = server_ms(server) + 3600000;
    const auto at = std::to_string(until - until % (60000 / 16) + 60000 / 16);
    server.command({"PEXPIREAT", "lock:x", at});
    server.command({"PEXPIREAT", "{lock:x}:limit", at});
    server.command({"CONFIG", "RESETSTAT"});
    REQUIRE(is_fence(take(server, 2, "b")));
    REQUIRE(is_fence(take(server, 3, "c")));
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
    REQUIRE(is_fence(take(server, 1, "a", "2")));
    REQUIRE(is_fence(take(server, 2, "b", "2")));
    // Every permit held, no lease over: nothing to drop, and no pruning tried.
    server.command({"CONFIG", "RESETSTAT"});
    CHECK(redlock::lock::every_permit_held(std::stoll(take(server, 1, "c", "2"))));
    CHECK(server.command({"INFO", "commandstats"}).find("cmdstat_zremrangebyscore") ==
          std::string::npos);
    // a's lease over by the server's clock (it died without a release; its permit key,
    // deleted here, would have expired with it).
    server.command({"ZADD", "lock:x", "1", "a"});
    server.command({"DEL", "{lock:x}:permit:1"});
    CHECK(is_fence(take(server, 1, "c", "2")));
    CHECK(server.command({"ZRANGE", "lock:x", "0", "-1"}) == "[b, c]");
}

TEST_CASE("a holder's metadata replaces whatever another left, and costs no DEL otherwise") {
    RedisServer server;
    // A hash left behind (the lock deleted by hand): none of its fields stays.
    server.command({"HSET", "{lock:x}:permit:1:meta", "host", "old", "note", "stale"});
    server.command({"HSET", "{lock:x}:fence", "f1", "10"});
    REQUIRE(take(server, 1, "a") == "11");
    CHECK(server.command({"HGETALL", "{lock:x}:permit:1:meta"}) == "[fence, 11, host, h]");
    CHECK(std::stoll(server.command({"PTTL", "{lock:x}:permit:1:meta"})) > 50000);
    server.command({"FLUSHALL"});
    server.command({"HSET", "{lock:x}:meta", "host", "old", "note", "stale"});
    server.command({"HSET", "{lock:x}:fence", "f", "10"});
    REQUIRE(acquire(server, "t", {"host", "h"}) == "11");
    CHECK(server.command({"HGETALL", "{lock:x}:meta"}) == "[fence, 11, host, h]");
    // A run that writes no metadata leaves none.
    REQUIRE(eval(server, k_release_script, {"t"}) == "1");
    server.command({"HSET", "{lock:x}:meta", "host", "old"});
    REQUIRE(acquire(server, "u") == "12");
    CHECK(server.command({"EXISTS", "{lock:x}:meta"}) == "0");
    // The usual case, no hash there: one HSET.
    REQUIRE(eval(server, k_release_script, {"u"}) == "1");
    server.command({"CONFIG", "RESETSTAT"});
    REQUIRE(acquire(server, "v", {"host", "h"}) == "13");
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
    REQUIRE(is_fence(take(server, 1, "a")));
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
// `held_ms`, keeping `keep` entries for 60 s, of a run that ended at `ended` (ms since the
// Unix epoch; "": when it arrives).
std::string record(const RedisServer& server, std::vector<std::string> fields,
                   const std::string& held_ms = "0", const std::string& keep = "10",
                   const std::string& ended = "") {
    std::string packed;
    for (const auto& f : fields)
        packed += f + '\0';
    return server.command({"EVAL", std::string(redlock::lock::k_history_script.source), "3",
                           "{lock:x}:fence", "lock:x", "{lock:x}:meta", "run", "tok", keep, "60000",
                           "0", held_ms, packed, ended});
}
// A field of lock:x's record.
std::string field(const RedisServer& server, const std::string& name) {
    return server.command({"HGET", "{lock:x}:fence", name});
}
// The page script's reply for lock:x, from `from` on, `count` entries.
std::string page(const RedisServer& server, const std::string& from = "+",
                 const std::string& count = "100") {
    return server.command({"EVAL", std::string(redlock::lock::k_history_page_script.source), "1",
                           "{lock:x}:fence", from, count, "65536", "1048576"});
}
// A time counter of lock:x's record (ms since the Unix epoch).
long long stat_ms(const RedisServer& server, const std::string& name) {
    return std::stoll(field(server, name));
}
// The started_ms of the newest entry of lock:x's history.
long long newest_start(const RedisServer& server) {
    return std::stoll(record_list(server, "e").at(1));
}
} // namespace

TEST_CASE("the newest entry is kept apart, and counted once it is no longer the newest") {
    RedisServer server;
    CHECK(record(server, {"run", "a", "outcome", "ran", "status", "0"}, "1500") == "1");
    // A name run once: its entry and nothing else (the counters a reading adds it to).
    CHECK(record_list(server, "e").at(0) == "a");
    CHECK(server.command({"HKEYS", "{lock:x}:fence"}) == "[e]");
    CHECK(record(server, {"run", "b", "outcome", "ran", "status", "3"}, "7200000") == "1");
    CHECK(field(server, "r:ran") == "1");
    CHECK(field(server, "d5") == "1");
    CHECK(field(server, "ds") == "1500");
    const std::string success = field(server, "ls");
    CHECK(success != "(nil)");
    CHECK(field(server, "lr") == success);
    CHECK(record(server, {"run", "c", "outcome", "skipped-held"}) == "1");
    CHECK(record(server, {"run", "d", "outcome", "lost", "status", "79"}, "100") == "1");
    CHECK(field(server, "r:ran") == "2");
    CHECK(field(server, "r:skipped-held") == "1");
    CHECK(field(server, "r:lost") == "(nil)"); // the newest
    CHECK(field(server, "d7200") == "1");
    CHECK(field(server, "ds") == "7201500");
    // A failure later moves the last run, never the last success.
    CHECK(record(server, {"run", "e", "outcome", "ran", "status", "1"}, "10") == "1");
    CHECK(field(server, "r:lost") == "1");
    CHECK(field(server, "d1") == "1");
    CHECK(field(server, "ls") == success);
    CHECK(field(server, "lr") >= success);
    // An outcome this version does not know is recorded, not counted.
    CHECK(record(server, {"run", "f", "outcome", "new-one"}) == "1");
    CHECK(record(server, {"run", "g", "outcome", "ran", "status", "0"}) == "1");
    CHECK(server.command({"HEXISTS", "{lock:x}:fence", "r:new-one"}) == "0");
    CHECK(page(server).starts_with("[0, [[7, [run, g, "));
}

TEST_CASE("the history's pages give the entries newest first, as many as kept") {
    RedisServer server;
    for (const char* run : {"a", "b", "c", "d", "e"})
        REQUIRE(record(server, {"run", run, "outcome", "ran", "host", "h", "command", "job"}, "0",
                       "3") == "1");
    const auto all = page(server);
    CHECK(all.starts_with("[0, [[5, [run, e, started_ms, "));
    CHECK(all.find("[4, [run, d, ") != std::string::npos);
    CHECK(all.find("[3, [run, c, ") != std::string::npos);
    CHECK(all.find("run, b") == std::string::npos);
    CHECK(all.find("host, h, command, job]]") != std::string::npos);
    // The older entries past the count are gone.
    CHECK(server.command({"HEXISTS", "{lock:x}:fence", "2"}) == "0");
    CHECK(field(server, "h") == "3 4 3");
    // A page of one from the newest says there is more, and the next one goes on.
    CHECK(page(server, "+", "1").starts_with("[1, [[5, "));
    CHECK(page(server, "4", "1").starts_with("[1, [[4, "));
    CHECK(page(server, "3", "5").starts_with("[0, [[3, "));
    // A count lowered: all but as many are dropped at the next write (the newest takes the
    // place of the one before, which it replaces).
    REQUIRE(record(server, {"run", "f", "outcome", "ran"}, "0", "1") == "1");
    CHECK(server.command({"HEXISTS", "{lock:x}:fence", "3"}) == "0");
    CHECK(server.command({"HEXISTS", "{lock:x}:fence", "4"}) == "0");
    CHECK(field(server, "h") == "5 4 1");
    CHECK(page(server).starts_with("[0, [[5, [run, f, "));
    // Many entries: dropped a sixteenth of the count at a time, never shown past it.
    for (int i = 0; i < 40; ++i)
        REQUIRE(record(server, {"run", "r" + std::to_string(i), "outcome", "ran"}, "0", "32") ==
                "1");
    CHECK(page(server).find("[13, ") == std::string::npos);
    CHECK(page(server).find("[14, ") != std::string::npos);
    // 0.4's counter has no history.
    server.command({"DEL", "{lock:x}:fence"});
    server.command({"SET", "{lock:x}:fence", "5"});
    CHECK(page(server) == "[0, []]");
}

TEST_CASE("entries past the age are dropped") {
    RedisServer server;
    REQUIRE(record(server, {"run", "old", "outcome", "ran"}, "0", "100") == "1");
    REQUIRE(record(server, {"run", "new", "outcome", "ran"}, "0", "100") == "1");
    // The older entry, started in 1970.
    auto old = record_list(server, "1");
    REQUIRE(old.size() >= 2);
    old[1] = "1000";
    std::string text;
    for (size_t i = 0; i < old.size(); ++i)
        text += (i ? std::string(1, '\0') : std::string()) + old[i];
    server.command({"HDEL", "{lock:x}:fence", "1:2", "1:3", "1:4"});
    server.command({"HSET", "{lock:x}:fence", "1", text});
    // One write in eight looks (by the server's clock): within a few hundred, one does.
    for (int i = 0; i < 400 && field(server, "1") != "(nil)"; ++i)
        REQUIRE(record(server, {"run", "r" + std::to_string(i), "outcome", "ran"}, "0", "1000") ==
                "1");
    CHECK(field(server, "1") == "(nil)");
    CHECK(page(server).find("run, old") == std::string::npos);
}

TEST_CASE("with history = 0 nothing is written") {
    RedisServer server;
    CHECK(record(server, {"run", "a", "outcome", "ran", "status", "0"}, "5", "0") == "0");
    CHECK(server.command({"EXISTS", "{lock:x}:fence"}) == "0");
}

TEST_CASE("about one write in eight drops the entries older than the age, and only those") {
    RedisServer server;
    // Two entries of runs that ended in 1970 (ms since the epoch), the older entries 1 and 2
    // once two more are written, and runs until a write falls on a ms that trims (by the
    // server's clock, a multiple of eight).
    REQUIRE(record(server, {"run", "old1", "outcome", "ran", "status", "0"}, "0", "100", "1000") ==
            "1");
    REQUIRE(record(server, {"run", "old2", "outcome", "ran", "status", "0"}, "0", "100", "2000") ==
            "1");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    int written = 0;
    while ((written < 2 || field(server, "2") != "(nil)") &&
           std::chrono::steady_clock::now() < deadline) {
        // A new run id each time: one run's entry is recorded once.
        const std::string run = "r" + std::to_string(written);
        REQUIRE(record(server, {"run", run, "outcome", "ran", "status", "0"}, "10", "100") == "1");
        ++written;
    }
    CHECK(field(server, "1") == "(nil)");
    CHECK(field(server, "2") == "(nil)");
    const auto all = page(server);
    CHECK(all.find("old") == std::string::npos);
    size_t entries = 0;
    for (size_t at = all.find("run, r"); at != std::string::npos; at = all.find("run, r", at + 1))
        ++entries;
    CHECK(entries == static_cast<size_t>(written));
}

TEST_CASE("the history script's duration buckets are the exporter's") {
    std::string bounds;
    for (auto b : redlock::fleet::k_duration_buckets)
        bounds += (bounds.empty() ? "" : ", ") + std::to_string(b);
    CHECK(std::string_view(redlock::lock::k_history_script.source)
              .find("local bounds = {" + bounds + "}") != std::string_view::npos);
}

TEST_CASE("the record's expiry is pushed back by a write whose run did not acquire, held long, "
          "or finds no record, not by every run") {
    RedisServer server;
    // The age is 60000 ms here: the record expires 60000 + 3750 ms after a push.
    auto pttl = [&] { return std::stoll(server.command({"PTTL", "{lock:x}:fence"})); };
    CHECK(record(server, {"run", "a", "outcome", "ran", "status", "0"}, "10") == "1");
    CHECK(pttl() > 60000);
    CHECK(pttl() <= 63750);
    // A run that acquired has pushed it back then (k_fence_take): its entry does not.
    server.command({"PEXPIRE", "{lock:x}:fence", "100000"});
    server.command({"CONFIG", "RESETSTAT"});
    CHECK(record(server, {"run", "b", "outcome", "ran", "status", "0"}, "10") == "1");
    CHECK(record(server, {"run", "c", "outcome", "lost", "status", "79"}, "10") == "1");
    CHECK(server.command({"INFO", "commandstats"}).find("cmdstat_pexpire:") == std::string::npos);
    CHECK(pttl() > 90000);
    // One that held a sixteenth of the age or more: pushed back from its end.
    CHECK(record(server, {"run", "d", "outcome", "ran", "status", "0"}, "3750") == "1");
    CHECK(pttl() <= 63750);
    // An entry of a run that did not acquire (a refusal, an interruption): pushed back.
    server.command({"PEXPIRE", "{lock:x}:fence", "1000"});
    CHECK(record(server, {"run", "e", "outcome", "interrupted"}) == "1");
    CHECK(pttl() > 60000);
}

TEST_CASE("a run's entry sent twice is recorded once, in the history and the counters") {
    RedisServer server;
    // The run's own release, then its releaser's (redlock killed while it waited): the same
    // run id, whatever the second says of it.
    CHECK(record(server, {"run", "a", "outcome", "ran", "status", "0"}, "1500") == "1");
    CHECK(record(server, {"run", "a", "outcome", "ran", "status", "0"}, "1700") == "0");
    CHECK(record(server, {"run", "b", "outcome", "failed", "status", "127"}) == "1");
    CHECK(record(server, {"run", "b", "outcome", "killed"}) == "0");
    CHECK(record(server, {"run", "a", "outcome", "killed"}) == "0");
    CHECK(page(server).find("run, b, ") != std::string::npos);
    CHECK(field(server, "r:ran") == "1");
    CHECK(field(server, "d5") == "1");
    CHECK(field(server, "ds") == "1500");
    CHECK(field(server, "ids") == "a");
    // The ids of the five entries before the newest are kept, no more, and of each its first
    // 12 digits: the record stays a listpack (a ziplist before Redis 7).
    for (const char* run : {"d00000000000000d", "e00000000000000e", "f00000000000000f",
                            "a00000000000000a", "b00000000000000b"})
        CHECK(record(server, {"run", run, "outcome", "ran", "status", "0"}) == "1");
    CHECK(field(server, "ids") == "a00000000000 f00000000000 e00000000000 d00000000000 b");
    const auto encoding = server.command({"OBJECT", "ENCODING", "{lock:x}:fence"});
    CHECK((encoding == "listpack" || encoding == "ziplist"));
    CHECK(record(server, {"run", "a00000000000000a", "outcome", "ran", "status", "0"}) == "0");
    CHECK(record(server, {"run", "b00000000000000b", "outcome", "ran", "status", "0"}) == "0");
    CHECK(record(server, {"run", "c", "outcome", "ran", "status", "0"}) == "1");
    CHECK(field(server, "r:ran") == "6");
    CHECK(field(server, "r:failed") == "1");
    CHECK(field(server, "r:killed") == "(nil)");
}

TEST_CASE("an entry that arrives late says when its run ended, and moves no last run or "
          "success back") {
    RedisServer server;
    // A run that ended a minute ago, whose release this server gets only now (it was frozen).
    const long long ended = server_ms(server) - 60000;
    CHECK(record(server, {"run", "a", "outcome", "ran", "status", "0"}, "1500", "10",
                 std::to_string(ended)) == "1");
    CHECK(newest_start(server) == ended - 1500);
    // An earlier run's entry that arrives after it has its own times; a's, counted now, are
    // the last run and success.
    CHECK(record(server, {"run", "b", "outcome", "ran", "status", "0"}, "10", "10",
                 std::to_string(ended - 5000)) == "1");
    CHECK(newest_start(server) == ended - 5010);
    CHECK(stat_ms(server, "lr") == ended);
    CHECK(stat_ms(server, "ls") == ended);
    // Counting b moves neither back; a later failure (counted once it is not the newest)
    // moves the last run only.
    CHECK(record(server, {"run", "c", "outcome", "ran", "status", "1"}, "10", "10",
                 std::to_string(ended + 1000)) == "1");
    CHECK(stat_ms(server, "lr") == ended);
    CHECK(stat_ms(server, "ls") == ended);
    // An end in the server's future (a host clock ahead), or one that is not a time, is the
    // server's TIME on arrival.
    for (const std::string& bad :
         std::vector<std::string>{std::to_string(server_ms(server) + 3600000), "banana", "-5"}) {
        const long long before = server_ms(server);
        CHECK(record(server, {"run", "d" + bad, "outcome", "ran", "status", "1"}, "10", "10",
                     bad) == "1");
        const long long after = server_ms(server);
        CHECK(newest_start(server) >= before - 10);
        CHECK(newest_start(server) <= after - 10);
    }
    CHECK(stat_ms(server, "lr") >= ended + 1000);
    CHECK(stat_ms(server, "ls") == ended);
    // A last success past the server's TIME is no time a run ended (the clock was stepped
    // back, or someone wrote it): a run's end replaces it.
    server.command({"HSET", "{lock:x}:fence", "ls", std::to_string(server_ms(server) + 86400000)});
    const long long now = server_ms(server) - 1000;
    CHECK(record(server, {"run", "e", "outcome", "ran", "status", "0"}, "10", "10",
                 std::to_string(now)) == "1");
    CHECK(record(server, {"run", "f", "outcome", "ran", "status", "1"}) == "1");
    CHECK(stat_ms(server, "ls") == now);
}

TEST_CASE("a --once-per run's newest entry says who ran the slot, and the slot record takes it "
          "back once it is not the newest") {
    RedisServer server;
    server.command({"SET", "lock:x", "t1", "PX", "60000"});
    REQUIRE(claim(server, "t1", "3600000", "0", "r1") == "1");
    REQUIRE(finish(server, "r1", "0") == "1");
    const auto before = inspect(server, {"f", "slot"});
    CHECK(before.find("host, h") != std::string::npos);
    // The run's entry: the slot record keeps only the slot and the run.
    REQUIRE(record(server,
                   {"run", "r1", "outcome", "ran", "status", "0", "slot_ms", "3600000", "host", "h",
                    "pid", "7", "user", "u", "command", "job"},
                   "20") == "1");
    CHECK(record_list(server, "s").size() == 3);
    const auto shared = inspect(server, {"f", "slot"});
    CHECK(shared.find("token, r1, started_ms, ") != std::string::npos);
    CHECK(shared.find("status, 0, host, h, pid, 7, user, u, command, job]") != std::string::npos);
    // A refusal of the slot after it: the record says all again itself.
    REQUIRE(record(server, {"run", "r2", "outcome", "skipped-slot", "slot_ms", "3600000"}) == "1");
    CHECK(record_list(server, "s").size() == 11);
    CHECK(record_list(server, "s").at(7) == "h");
    const auto after = inspect(server, {"f", "slot"});
    CHECK(after.find("status, 0, host, h, pid, 7, user, u, command, job]") != std::string::npos);
}
