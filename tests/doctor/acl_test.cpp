#include <algorithm>
#include <set>
#include <string>

#include <doctest/doctest.h>

#include "doctor/acl.hpp"
#include "lock/scripts.hpp"

using namespace redlock::doctor;
using Kind = AclRefusal::Kind;

namespace {

// The commands a script calls with redis.call (redis.pcall: a refusal there is swallowed).
std::set<std::string> called_by(std::string_view source) {
    std::set<std::string> names;
    const std::string_view needle = "redis.call(\"";
    for (size_t at = source.find(needle); at != std::string_view::npos;
         at = source.find(needle, at + 1)) {
        auto start = at + needle.size();
        names.emplace(source.substr(start, source.find('"', start) - start));
    }
    return names;
}

std::string without_fair_parts(std::string source) {
    for (std::string_view part :
         {redlock::lock::k_fair_enrol.view(), redlock::lock::k_fair_head_held.view(),
          redlock::lock::k_fair_leave.view()})
        if (auto at = source.find(part); at != std::string::npos)
            source.erase(at, part.size());
    return source;
}

redlock::config::ServerConfig plain_server() {
    return {};
}

} // namespace

TEST_CASE("each probe names every command its script calls") {
    const ProbeKeys keys("lock:");
    auto probes = acl_probe_round1(keys, plain_server(), "t");
    auto more = acl_probe_round2(keys, "t", 1);
    probes.insert(probes.end(), more.begin(), more.end());
    size_t scripts = 0;
    for (const auto& p : probes) {
        if (p.argv.front() != "EVAL" || p.argv[1] == "return 1")
            continue;
        ++scripts;
        std::set<std::string> listed(p.calls.begin(), p.calls.end());
        auto called = called_by(p.argv[1]);
        // Without the --fair keys, an acquisition skips its --fair parts.
        if (p.argv[2] == "3")
            called = called_by(without_fair_parts(p.argv[1]));
        std::string text;
        for (const auto& c : called)
            text += c + " ";
        INFO("the script calls: ", text);
        CHECK(listed == called);
    }
    CHECK(scripts == 15);
}

TEST_CASE("the probe keys sit under the prefix, in the probe lock's hash slot") {
    const ProbeKeys keys("app:");
    CHECK(keys.lock == "app:redlock-doctor-probe");
    CHECK(keys.meta == "{app:redlock-doctor-probe}:meta");
    CHECK(keys.channel == "{app:redlock-doctor-probe}:released");
    for (const auto& p : acl_dryrun_probes(keys, plain_server()))
        for (const auto& arg : p.argv)
            if (arg.find("lock:") != std::string::npos)
                FAIL("a probe names a key outside the prefix: " << arg);
}

TEST_CASE("SELECT and WAIT are asked only where the server needs them") {
    const ProbeKeys keys("lock:");
    auto names = [&](const redlock::config::ServerConfig& server) {
        std::set<std::string> out;
        for (const auto& p : acl_dryrun_probes(keys, server))
            out.insert(p.argv.front());
        return out;
    };
    CHECK_FALSE(names(plain_server()).contains("SELECT"));
    CHECK_FALSE(names(plain_server()).contains("WAIT"));
    auto server = plain_server();
    server.url.db = 2;
    server.replicas = 1;
    CHECK(names(server).contains("SELECT"));
    CHECK(names(server).contains("WAIT"));
}

TEST_CASE("ACL refusals are read for what they refused") {
    auto r = parse_acl_refusal("This user has no permissions to run the 'pexpire' command");
    REQUIRE(r);
    CHECK(r->kind == Kind::command);
    CHECK(r->name == "pexpire");
    r = parse_acl_refusal("NOPERM this user has no permissions to run the 'config|get' command");
    REQUIRE(r);
    CHECK(r->name == "config|get");
    r = parse_acl_refusal("This user has no permissions to access the '{lock:x}:meta' key");
    REQUIRE(r);
    CHECK(r->kind == Kind::key);
    CHECK(r->name == "{lock:x}:meta");
    r = parse_acl_refusal("This user has no permissions to access the 'other' channel");
    REQUIRE(r);
    CHECK(r->kind == Kind::channel);
    r = parse_acl_refusal("NOPERM this user has no permissions to access one of the keys used "
                          "as arguments");
    REQUIRE(r);
    CHECK(r->kind == Kind::key);
    CHECK(r->name.empty());
    r = parse_acl_refusal("ERR The user executing the script can't run this command or "
                          "subcommand script: 4a15, on @user_script:1.");
    REQUIRE(r);
    CHECK(r->kind == Kind::command);
    CHECK(r->name.empty());
    CHECK_FALSE(parse_acl_refusal("WRONGTYPE Operation against a key holding the wrong kind"));
    CHECK_FALSE(parse_acl_refusal("ERR fence counter {lock:x}:fence is not a number"));
}

TEST_CASE("the verdict names what is missing, what it costs, and the rules that allow it") {
    const ProbeKeys keys("lock:");
    const auto features = acl_features(plain_server());
    const auto probes = acl_dryrun_probes(keys, plain_server());
    auto probe = [&](std::string_view name) {
        return &*std::ranges::find_if(probes, [&](const AclProbe& p) { return p.argv[0] == name; });
    };

    std::vector<AclFinding> none;
    auto ok = acl_verdict("locker", "checked with ACL DRYRUN", features, none, keys);
    CHECK(ok.name == "acl");
    CHECK(ok.level == Level::ok);
    CHECK(ok.message == "user 'locker' may run every command redlock sends (checked with ACL "
                        "DRYRUN)");

    std::vector<AclFinding> publish{{probe("PUBLISH"), {Kind::command, "publish"}}};
    auto note = acl_verdict("locker", "checked with ACL DRYRUN", features, publish, keys);
    CHECK(note.level == Level::note);
    CHECK(note.message == "user 'locker' may not run PUBLISH (waiters poll every 20-200ms "
                          "instead of being woken by the release); allow with: ACL SETUSER "
                          "locker +publish (checked with ACL DRYRUN)");

    std::vector<AclFinding> both{{probe("PEXPIRE"), {Kind::command, "pexpire"}},
                                 {probe("HSET"), {Kind::key, "{lock:redlock-doctor-probe}:meta"}},
                                 {probe("PUBLISH"), {Kind::command, "publish"}}};
    auto risk = acl_verdict("locker", "checked with ACL DRYRUN", features, both, keys);
    CHECK(risk.level == Level::risk);
    CHECK(risk.message ==
          "user 'locker' may not run PEXPIRE (run, acquire, extend and release fail), PUBLISH "
          "(waiters poll every 20-200ms instead of being woken by the release); may not access "
          "the keys '{lock:*}:*' (run, acquire, extend and release fail); allow with: ACL "
          "SETUSER locker +pexpire +publish '~{lock:*}:*' (checked with ACL DRYRUN)");
}

TEST_CASE("a refusal inside a script names the commands that script calls") {
    const ProbeKeys keys("lock:");
    const auto features = acl_features(plain_server());
    const auto probes = acl_probe_round1(keys, plain_server(), "t");
    std::vector<AclFinding> findings{{&probes[1], {Kind::command, {}}}}; // the renewal
    auto check = acl_verdict("locker", "probed", features, findings, keys);
    CHECK(check.level == Level::risk);
    CHECK(check.message == "user 'locker' may not run one of GET PEXPIRE HSET PTTL (run, "
                           "acquire, extend and release fail); allow with: ACL SETUSER locker "
                           "+get +pexpire +hset +pttl (probed)");
}
