// The scripts of a `redlock cron` slot (lock/cron_scripts.hpp), one server at a time.
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "lock/cron_scripts.hpp"
#include "lock/cron_slot.hpp"
#include "support/redis_server.hpp"

using redlock::test::RedisServer;

namespace {

long long server_ms(const RedisServer& server) {
    auto t = server.command({"TIME"}); // "[seconds, microseconds]"
    auto comma = t.find(',');
    return std::stoll(t.substr(1, comma - 1)) * 1000 + std::stoll(t.substr(comma + 2)) / 1000;
}

// The claim of `slot` by the holder of `token` (a plain lock: KEYS[1] is the name's).
// A reply's first `n` elements, as the server renders them: "[a, b, c".
std::string head(const std::string& reply, size_t n) {
    size_t at = 0;
    for (size_t i = 0; i < n && at != std::string::npos; ++i)
        at = reply.find(", ", at + 1);
    return at == std::string::npos ? reply : reply.substr(0, at) + "]";
}

std::string claim(const RedisServer& server, const std::string& token, long long slot,
                  long long until, bool at_least_once = false, long long defer_until = 0,
                  const std::string& unsure = "") {
    return server.command({"EVAL", std::string(redlock::lock::k_cron_claim_script.source), "4",
                           "lock:j", "{lock:j}:meta", "{lock:j}:fence", "lock:j", token,
                           std::to_string(slot), std::to_string(until), at_least_once ? "1" : "0",
                           std::to_string(until + 3600000), std::to_string(slot + 60000),
                           "* * * * *", "UTC", std::to_string(defer_until), "h-" + token, unsure});
}

std::string look(const RedisServer& server, long long slot, const std::string& what,
                 bool at_least_once = false) {
    return server.command({"EVAL", std::string(redlock::lock::k_cron_yield_script.source), "3",
                           "lock:j", "{lock:j}:meta", "{lock:j}:fence", "t", std::to_string(slot),
                           at_least_once ? "1" : "0", what, std::to_string(slot + 3600000)});
}

std::string finish(const RedisServer& server, const std::string& token, long long slot,
                   const std::string& state) {
    return server.command({"EVAL", std::string(redlock::lock::k_cron_finish_script.source), "1",
                           "{lock:j}:fence", token, std::to_string(slot), state, "0"});
}

// Holds the lock as a cron run of `slot` would (its metadata names the slot).
void hold(const RedisServer& server, const std::string& token, long long slot) {
    server.command({"SET", "lock:j", token, "PX", "60000"});
    server.command({"DEL", "{lock:j}:meta"});
    server.command({"HSET", "{lock:j}:meta", "token", token, "cron_slot", std::to_string(slot)});
}

std::string field(const RedisServer& server, const std::string& name) {
    return server.command({"HGET", "{lock:j}:fence", name});
}

} // namespace

TEST_CASE("a cron slot is claimed once, by the lock's holder, never before its instant") {
    RedisServer server;
    const long long now = server_ms(server) / 1000 * 1000;
    const long long slot = now - 1000;
    CHECK(claim(server, "t1", slot, now + 60000) == "0"); // not holding the lock
    hold(server, "t1", slot);
    // A slot a minute ahead of the server's clock: early, by about that much.
    const auto early = claim(server, "t1", now + 60000, now + 120000);
    REQUIRE(early.starts_with("[3, "));
    CHECK(std::stoll(early.substr(4)) > 58000);
    CHECK(field(server, "c") == "(nil)");
    // Claimed: the record before had nothing.
    CHECK(head(claim(server, "t1", slot, now + 60000), 3) == "[1, -1, -1]");
    CHECK(field(server, "cs") == "running");
    CHECK(field(server, "ch") == "h-t1");
    CHECK(field(server, "cn") == std::to_string(slot + 60000));
    CHECK(server.command({"HGET", "{lock:j}:meta", "cron_claimed"}) == std::to_string(slot));
    const long long pttl = std::stoll(server.command({"PTTL", "{lock:j}:fence"}));
    CHECK(pttl > 3600000);
    // The same claimer again (a retry) is still yes; another holder is told it is decided.
    CHECK(head(claim(server, "t1", slot, now + 60000), 3) == "[1, -1, -1]");
    hold(server, "t2", slot);
    CHECK(head(claim(server, "t2", slot, now + 60000), 5) ==
          "[-1, " + std::to_string(slot) + ", -1, running, h-t1]");
    // An earlier slot after it: decided too (never run after a later one).
    CHECK(claim(server, "t2", slot - 5000, now + 60000).starts_with("[-1, "));
    // The next slot: claimed, and the one before it said.
    CHECK(head(claim(server, "t2", slot + 500, now + 60000), 3) ==
          "[1, " + std::to_string(slot) + ", -1]");
}

TEST_CASE("a cron slot past its window is recorded missed once") {
    RedisServer server;
    const long long now = server_ms(server);
    const long long slot = now - 10000;
    hold(server, "t1", slot);
    CHECK(head(claim(server, "t1", slot, now - 1000), 3) == "[-4, -1, -1]");
    CHECK(field(server, "cs") == "missed");
    CHECK(head(claim(server, "t1", slot, now - 1000), 5) ==
          "[-1, " + std::to_string(slot) + ", -1, missed, ]");
}

TEST_CASE("an at-least-once slot whose run died is claimed again, an at-most-once one is not") {
    RedisServer server;
    const long long now = server_ms(server);
    const long long slot = now - 1000;
    hold(server, "t1", slot);
    REQUIRE(head(claim(server, "t1", slot, now + 60000, true), 3) == "[1, -1, -1]");
    // t1's run died: its lock is gone, another run holds it.
    hold(server, "t2", slot);
    CHECK(claim(server, "t2", slot, now + 60000, false).starts_with("[-1, "));
    CHECK(head(claim(server, "t2", slot, now + 60000, true), 3) ==
          "[2, " + std::to_string(slot) + ", -1]");
    CHECK(field(server, "ct") == "t2");
    // Ended on its own: done, not claimed again.
    CHECK(finish(server, "t1", slot, "done") == "0"); // not the record's run any more
    CHECK(finish(server, "t2", slot, "done") == "1");
    hold(server, "t3", slot);
    CHECK(claim(server, "t3", slot, now + 60000, true).starts_with("[-1, "));
    // A run that could not start leaves the slot open to any run.
    CHECK(finish(server, "t2", slot, "unstarted") == "1");
    CHECK(head(claim(server, "t3", slot, now + 60000, false), 3) ==
          "[2, " + std::to_string(slot) + ", -1]");
}

TEST_CASE("a run that finds the lock held learns whether it overlaps, and records it once") {
    RedisServer server;
    const long long now = server_ms(server) / 1000 * 1000;
    const long long first = now - 2000;
    const long long second = now - 1000;
    CHECK(head(look(server, second, "skip"), 1) == "[10]"); // free
    // A holder of the first slot that has not claimed it yet: look again shortly.
    hold(server, "t1", first);
    CHECK(head(look(server, second, "skip"), 1) == "[12]");
    REQUIRE(head(claim(server, "t1", first, now + 60000), 3) == "[1, -1, -1]");
    // Claimed and running: an overlap, looked at, or recorded skipped (once).
    CHECK(head(look(server, second, "look"), 1) == "[13]");
    CHECK(field(server, "ck") == "(nil)");
    CHECK(head(look(server, second, "skip"), 1) == "[14]");
    CHECK(field(server, "ck") == std::to_string(second));
    CHECK(look(server, second, "skip").starts_with("[-1, "));
    // Its claim afterwards finds it decided.
    hold(server, "t2", second);
    CHECK(claim(server, "t2", second, now + 60000).starts_with("[-1, "));
    // A holder about to claim this very slot: look again shortly.
    hold(server, "t2", now);
    CHECK(head(look(server, now, "skip"), 1) == "[12]");
}

TEST_CASE("overlap=queue keeps one slot waiting and skips the others") {
    RedisServer server;
    const long long now = server_ms(server) / 1000 * 1000;
    hold(server, "t1", now - 3000);
    REQUIRE(head(claim(server, "t1", now - 3000, now + 60000), 3) == "[1, -1, -1]");
    CHECK(head(look(server, now - 2000, "queue"), 1) == "[15]");
    CHECK(field(server, "cq") == std::to_string(now - 2000));
    CHECK(head(look(server, now - 2000, "queue"), 1) ==
          "[15]"); // the same slot again: still queued
    CHECK(head(look(server, now - 1000, "queue"), 1) == "[14]"); // one waits already: skipped
    // The queued slot is claimed once the lock is its run's, though a later one was skipped.
    hold(server, "t2", now - 2000);
    CHECK(head(claim(server, "t2", now - 2000, now + 60000), 3) ==
          "[1, " + std::to_string(now - 3000) + ", " + std::to_string(now - 1000) + "]");
}

TEST_CASE("an at-least-once slot claimed by a run still holding waits for its end") {
    RedisServer server;
    const long long now = server_ms(server);
    hold(server, "t1", now - 1000);
    REQUIRE(head(claim(server, "t1", now - 1000, now + 60000, true), 3) == "[1, -1, -1]");
    CHECK(head(look(server, now - 1000, "skip", true), 1) == "[11]");
    CHECK(look(server, now - 1000, "skip", false).starts_with("[-1, "));
}

TEST_CASE("a slot's missed and skipped entries have one id wherever they are written") {
    using redlock::lock::slot_entry_id;
    CHECK(slot_entry_id("job", 1000, "missed") == slot_entry_id("job", 1000, "missed"));
    CHECK(slot_entry_id("job", 1000, "missed") != slot_entry_id("job", 2000, "missed"));
    CHECK(slot_entry_id("job", 1000, "missed") != slot_entry_id("job", 1000, "skipped-overlap"));
    CHECK(slot_entry_id("job", 1000, "missed").size() == 16);
}

TEST_CASE("an at-least-once job's later slot lets the rerun of a dead one go first, a while") {
    RedisServer server;
    const long long now = server_ms(server);
    hold(server, "t1", now - 2000);
    REQUIRE(head(claim(server, "t1", now - 2000, now + 60000, true), 3) == "[1, -1, -1]");
    // t1's run died; t2 holds the lock for the next slot, within the deferral: not yet.
    hold(server, "t2", now - 1000);
    CHECK(head(claim(server, "t2", now - 1000, now + 60000, true, now + 5000), 1) == "[5]");
    // At most once: no deferral.
    CHECK(head(claim(server, "t2", now - 1000, now + 60000, false, now + 5000), 1) == "[1]");
}

namespace {
// The history script writing a cron run's entry (`fields`: field, value, ...) for lock:j,
// keeping 10 entries for 60 s, and the record until `keep_until` if given.
std::string record_entry(const RedisServer& server, std::vector<std::string> fields,
                         const std::string& keep_until = {}) {
    std::string packed;
    for (const auto& f : fields)
        packed += f + '\0';
    std::vector<std::string> argv{"EVAL",   std::string(redlock::lock::k_history_script.source),
                                  "3",      "{lock:j}:fence",
                                  "lock:j", "{lock:j}:meta",
                                  "run",    "tok",
                                  "10",     "60000",
                                  "0",      "0",
                                  packed,   ""};
    if (!keep_until.empty())
        argv.push_back(keep_until);
    return server.command(argv);
}
// lock:j's newest history entry, its pieces joined (lock/scripts.hpp, k_blob).
std::string newest(const RedisServer& server) {
    std::string out;
    for (const char* piece : {"e", "e:2", "e:3", "e:4"})
        if (auto v = field(server, piece); v != "(nil)")
            out += v;
    return out;
}
} // namespace

TEST_CASE("a cron slot's record is fields of the name's record, which stays compact") {
    RedisServer server;
    const long long now = server_ms(server);
    server.command({"HSET", "{lock:j}:fence", "f", "5"});
    hold(server, "t1", now - 1000);
    const std::string host(300, 'h');
    REQUIRE(head(server.command({"EVAL", std::string(redlock::lock::k_cron_claim_script.source),
                                 "4", "lock:j", "{lock:j}:meta", "{lock:j}:fence", "lock:j", "t1",
                                 std::to_string(now - 1000), std::to_string(now + 60000), "0",
                                 std::to_string(now + 3600000), std::to_string(now + 59000),
                                 "* * * * *", "UTC", "0", host}),
                 3) == "[1, -1, -1]");
    CHECK(field(server, "f") == "5"); // the fence counter beside it
    CHECK(field(server, "ch") == host.substr(0, 63));
    const auto encoding = server.command({"OBJECT", "ENCODING", "{lock:j}:fence"});
    CHECK((encoding == "listpack" || encoding == "ziplist"));
    CHECK(server.command({"EXISTS", "{lock:j}:slot"}) == "0");
}

TEST_CASE("a cron run's history entry names its slot, and keeps the record as the slot needs") {
    RedisServer server;
    const long long now = server_ms(server);
    REQUIRE(record_entry(server, {"run", "r1", "outcome", "missed", "slot", "1700000000000"},
                         std::to_string(now + 3600000)) == "1");
    // The entry keeps the slot (history shows it), and the record lives past the age (60 s)
    // until the slot's record may be needed.
    CHECK(newest(server).find("1700000000000") != std::string::npos);
    CHECK(std::stoll(server.command({"PTTL", "{lock:j}:fence"})) > 3500000);
    // Never sooner than it would expire anyway, and without it the history's age.
    REQUIRE(record_entry(server, {"run", "r2", "outcome", "missed", "slot", "1700000060000"},
                         std::to_string(now + 1000)) == "1");
    CHECK(std::stoll(server.command({"PTTL", "{lock:j}:fence"})) > 60000);
    REQUIRE(record_entry(server, {"run", "r3", "outcome", "missed", "slot", "1700000120000"}) ==
            "1");
    CHECK(std::stoll(server.command({"PTTL", "{lock:j}:fence"})) <= 63750);
}

TEST_CASE("a run's own claim whose answer it lost is taken over by its next token") {
    RedisServer server;
    const long long now = server_ms(server) / 1000 * 1000;
    const long long slot = now - 1000;
    // The claim by t1 landed, its answer lost: the run tries again as t3 (t2 unanswered too).
    hold(server, "t1", slot);
    REQUIRE(head(claim(server, "t1", slot, now + 60000), 3) == "[1, -1, -1]");
    hold(server, "t3", slot);
    // Another run's claim is not taken over: a token that merely contains t1 is not t1.
    CHECK(claim(server, "t3", slot, now + 60000, false, 0, "xt1,t10").starts_with("[-1, "));
    CHECK(field(server, "ct") == "t1");
    CHECK(head(claim(server, "t3", slot, now + 60000, false, 0, "t2,t1"), 3) == "[1, -1, -1]");
    CHECK(field(server, "ct") == "t3");
    CHECK(server.command({"HGET", "{lock:j}:meta", "cron_claimed"}) == std::to_string(slot));
    // Its end is recorded by the token that ran it.
    CHECK(finish(server, "t3", slot, "done") == "1");
    // Once ended, the slot is decided even for a token the run once had.
    hold(server, "t4", slot);
    CHECK(claim(server, "t4", slot, now + 60000, false, 0, "t3").starts_with("[-1, "));
}
