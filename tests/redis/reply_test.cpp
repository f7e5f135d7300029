#include <doctest/doctest.h>

#include "redis/reply.hpp"

using redlock::redis::describe_refusal;
using redlock::redis::error_code;
using redlock::redis::ErrorCode;
using redlock::redis::refused_before_running;

TEST_CASE("an error reply is typed by its prefix") {
    CHECK(error_code("NOSCRIPT No matching script. Please use EVAL.") == ErrorCode::noscript);
    CHECK(error_code("MOVED 3999 127.0.0.1:6381") == ErrorCode::moved);
    CHECK(error_code("ASK 3999 127.0.0.1:6381") == ErrorCode::ask);
    CHECK(error_code("TRYAGAIN Multiple keys request during rehashing of slot") ==
          ErrorCode::tryagain);
    CHECK(error_code("CROSSSLOT Keys in request don't hash to the same slot") ==
          ErrorCode::crossslot);
    CHECK(error_code("READONLY You can't write against a read only replica.") ==
          ErrorCode::readonly);
    CHECK(error_code("WRONGTYPE Operation against a key holding the wrong kind of value") ==
          ErrorCode::wrongtype);
    CHECK(error_code("LIMIT 3") == ErrorCode::limit);
    CHECK(error_code("ERR unknown command 'EVALSHA', with args beginning with: ") ==
          ErrorCode::unknown_command);
    CHECK(error_code("ERR syntax error") == ErrorCode::other);
    CHECK(error_code("") == ErrorCode::other);
}

TEST_CASE("authentication and ACL errors are told apart, old servers' wordings too") {
    CHECK(error_code("NOAUTH Authentication required.") == ErrorCode::noauth);
    CHECK(error_code("ERR Protocol error: unauthenticated multibulk length") == ErrorCode::noauth);
    CHECK(error_code("WRONGPASS invalid username-password pair or user is disabled.") ==
          ErrorCode::wrongpass);
    CHECK(error_code("ERR invalid password") == ErrorCode::wrongpass);
    CHECK(error_code("ERR AUTH <password> called without any password configured") ==
          ErrorCode::wrongpass);
    CHECK(error_code("NOPERM User u has no permissions to run the 'config|get' command") ==
          ErrorCode::noperm);
    // A command a script called, refused after what the script did before it.
    CHECK(error_code("NOPERM User u has no permissions to run the 'del' command script: "
                     "abc, on @user_script:3.") == ErrorCode::script_noperm);
    CHECK(error_code("ERR The user executing the script can't run this command or "
                     "subcommand script: abc") == ErrorCode::script_noperm);
    CHECK(error_code("ERR The user executing the script can't access at least one of the "
                     "keys mentioned in the command") == ErrorCode::script_noperm);
    // Redis 8 and Valkey 8.
    CHECK(error_code("ERR ACL failure in script: User locker has no permissions to run the "
                     "'del' command script: 875cea9e, on @user_script:3.") ==
          ErrorCode::script_noperm);
    CHECK(error_code("ERR ACL failure in script: No permissions to access a key script: "
                     "875cea9e, on @user_script:1.") == ErrorCode::script_noperm);
    // Redis 6.0.
    CHECK(error_code("ERR Error running script (call to f_5f85): @user_script:1: @user_script: "
                     "1: The user executing the script can't run this command or subcommand") ==
          ErrorCode::script_noperm);
}

TEST_CASE("a refusal before a command ran says so; a script's refusal came after it wrote") {
    CHECK(refused_before_running("NOAUTH Authentication required."));
    CHECK(refused_before_running("NOPERM User u has no permissions to run the 'evalsha' command"));
    CHECK(refused_before_running("MOVED 3999 127.0.0.1:6381"));
    CHECK_FALSE(refused_before_running("NOPERM User u has no permissions to run the 'del' "
                                       "command script: abc, on @user_script:3."));
    CHECK_FALSE(refused_before_running("WRONGTYPE Operation against a key"));
    CHECK_FALSE(refused_before_running("ERR fence counter {lock:x}:fence is not a number"));
}

TEST_CASE("a refusal is put in words a person can act on") {
    CHECK(describe_refusal("NOAUTH Authentication required.", false) ==
          "the server requires a password and none was given (NOAUTH Authentication required.)");
    CHECK(describe_refusal("NOAUTH Authentication required.", true) ==
          "NOAUTH Authentication required.");
    CHECK(describe_refusal("NOPERM this user has no permissions", false) ==
          "permission denied by the server's ACL: NOPERM this user has no permissions");
}
