#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "doctor/acl.hpp"
#include "doctor/version.hpp"

using namespace redlock::doctor;

namespace {
const char* k_valkey_info = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n"
                            "valkey_version:8.1.1\r\nvalkey_release_stage:ga\r\n";
} // namespace

TEST_CASE("the server's name and version are read from INFO server, Valkey's its own") {
    auto v = server_version("# Server\r\nredis_version:6.0.16\r\nredis_git_sha1:00000000\r\n");
    CHECK(v.name == "redis");
    CHECK(v.version == "6.0.16");
    CHECK(v.redis == std::pair{6, 0});
    v = server_version(k_valkey_info);
    CHECK(v.name == "valkey");
    CHECK(v.version == "8.1.1");
    CHECK(v.redis == std::pair{7, 2});
    v = server_version("# Server\r\nredis_mode:standalone\r\n");
    CHECK(v.version.empty());
    CHECK_FALSE(v.redis);
    CHECK_FALSE(server_version("redis_version:banana\r\n").redis);
    CHECK(info_field("role:master\r\nconnected_slaves:2\r\n", "connected_slaves") == "2");
    CHECK(info_field("xrole:replica\r\nrole:master\r\n", "role") == "master");
}

TEST_CASE("Redis 6.0 and later run every mode; an older server is a risk naming what fails") {
    auto check = version_check(server_version("redis_version:6.0.16\r\n"));
    CHECK(check.name == "version");
    CHECK(check.level == Level::ok);
    CHECK(check.message == "redis 6.0.16: every mode's scripts run here");
    check = version_check(server_version(k_valkey_info));
    CHECK(check.level == Level::ok);
    CHECK(check.message == "valkey 8.1.1 (Redis 7.2): every mode's scripts run here");

    check = version_check(server_version("redis_version:5.0.14\r\n"));
    CHECK(check.level == Level::risk);
    CHECK(check.message == "redis 5.0.14 is older than 6.0, the oldest redlock supports; cannot "
                           "run here: --fair (6.0: SET KEEPTTL)");
    check = version_check(server_version("redis_version:3.2.12\r\n"));
    CHECK(check.level == Level::risk);
    CHECK(check.message ==
          "redis 3.2.12 is older than 6.0, the oldest redlock supports; cannot run here: --fair "
          "(6.0: SET KEEPTTL); run, acquire, --limit, --once-per and the history (5.0: writes "
          "after TIME in a script: a new fence counter starts from the clock); extend (4.0: "
          "HSET of several fields)");

    check = version_check(server_version(""));
    CHECK(check.level == Level::note);
    CHECK(check.message == "cannot read the server's version (INFO refused): redlock needs "
                           "Redis 6.0 or later, or Valkey");
}

TEST_CASE("a mode's script that failed for want of a command makes the version a risk") {
    const std::vector<std::string> lacking{"--limit fails: ERR Error running script (call to "
                                           "f_5f85): @user_script:43: ERR syntax error"};
    auto check = version_check(server_version("redis_version:6.0.16\r\n"), lacking);
    CHECK(check.level == Level::risk);
    CHECK(check.message == "redis 6.0.16: a lock script calls a command or option this server "
                           "lacks (--limit fails: ERR Error running script (call to f_5f85): "
                           "@user_script:43: ERR syntax error)");
    check = version_check(server_version(""), lacking);
    CHECK(check.level == Level::risk);
}

TEST_CASE("an error reply says a command or option is missing, or something else") {
    CHECK(lacks_command("ERR Error running script (call to f_5f85): @user_script:43: ERR syntax "
                        "error"));
    CHECK(lacks_command("ERR unknown command `EVALSHA_RO`, with args beginning with: "));
    CHECK(lacks_command("ERR Error running script (call to f_1): @user_script:1: "
                        "@user_script: 1: Unknown Redis command called from Lua script"));
    CHECK(lacks_command("ERR Unknown subcommand or wrong number of arguments for 'DRYRUN'."));
    CHECK(lacks_command("ERR wrong number of arguments for 'pexpireat' command"));
    CHECK_FALSE(lacks_command("WRONGTYPE Operation against a key holding the wrong kind"));
    CHECK_FALSE(lacks_command("LIMIT 3"));
    CHECK_FALSE(lacks_command("ERR fence counter {lock:x}:fence is not a number"));
    CHECK_FALSE(lacks_command("NOPERM this user has no permissions to run the 'zadd' command"));
}
