#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "util/redact.hpp"

using redlock::util::redact_secrets;

TEST_CASE("redact_secrets leaves a command without secrets as it is") {
    CHECK(redact_secrets("make -j2 'all tests'") == "make -j2 'all tests'");
    CHECK(redact_secrets("redlock -s redis://host:6380/2 run -k nightly -- ./batch.sh") ==
          "redlock -s redis://host:6380/2 run -k nightly -- ./batch.sh");
    CHECK(redact_secrets("git clone ssh://git@example.com/repo") ==
          "git clone ssh://git@example.com/repo");
    CHECK(redact_secrets("") == "");
}

TEST_CASE("redact_secrets masks the password of every URL, inside any word") {
    CHECK(redact_secrets("redlock -s redis://user:secret@host acquire job") ==
          "redlock -s redis://user:***@host acquire job");
    CHECK(redact_secrets("sh -c 'tok=$(redlock -s '\\''redis://:pw@h:1'\\'' acquire job)'") ==
          "sh -c 'tok=$(redlock -s '\\''redis://:***@h:1'\\'' acquire job)'");
    CHECK(redact_secrets("--server=rediss://u:p%40ss@a --db postgres://x:y@b/db") ==
          "--server=rediss://u:***@a --db postgres://x:***@b/db");
}

TEST_CASE("redact_secrets masks values of options and assignments that name a secret") {
    CHECK(redact_secrets("mysql --password hunter2 db") == "mysql --password *** db");
    CHECK(redact_secrets("curl --auth-token=abc123 x") == "curl --auth-token=*** x");
    CHECK(redact_secrets("sh -c 'PGPASSWORD=s3cret psql'") == "sh -c 'PGPASSWORD=*** psql'");
    CHECK(redact_secrets("REDISCLI_AUTH=x redis-cli ping") == "REDISCLI_AUTH=*** redis-cli ping");
    CHECK(redact_secrets("deploy --api-key 'a b c' --verbose") ==
          "deploy --api-key '***' --verbose");
    CHECK(redact_secrets("curl -H 'Authorization: Bearer xyz.abc' https://api") ==
          "curl -H 'Authorization: ***' https://api");
    CHECK(redact_secrets("tool --token -v") == "tool --token -v");
}

TEST_CASE("redact_secrets masks redis-cli's -a only in a redis-cli command") {
    CHECK(redact_secrets("redis-cli -a hunter2 ping") == "redis-cli -a *** ping");
    CHECK(redact_secrets("cp -a src dst") == "cp -a src dst");
}

TEST_CASE("redact_secrets masks known passwords wherever they appear") {
    std::vector<std::string> known{"hunter2", ""};
    CHECK(redact_secrets("echo hunter2; ./job --x=hunter2", known) == "echo ***; ./job --x=***");
    CHECK(redact_secrets("nothing here", known) == "nothing here");
}
