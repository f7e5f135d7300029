#include <string>

#include <doctest/doctest.h>

#include "lock/name.hpp"

using redlock::lock::k_max_name_length;
using redlock::lock::validate_name;
using redlock::util::ErrorKind;

namespace {

// The message of the usage error validate_name must return for `name`.
std::string rejection(std::string_view name) {
    auto result = validate_name(name);
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == ErrorKind::usage);
    return result.error().message;
}

const std::string k_allowed_hint = "(use A-Z a-z 0-9 . _ : / @ + -)";

} // namespace

TEST_CASE("a lock name may use letters, digits and . _ : / @ + -") {
    CHECK(validate_name("a"));
    CHECK(validate_name("backup"));
    CHECK(validate_name("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"));
    CHECK(validate_name("._:/@+-"));
    CHECK(validate_name("cron/nightly-backup@db1:v2.0+patch_3"));
}

TEST_CASE("a lock name must not be empty") {
    CHECK(rejection("") == "lock name must not be empty");
}

TEST_CASE("a lock name may be 200 characters long but not 201") {
    REQUIRE(k_max_name_length == 200);
    CHECK(validate_name(std::string(200, 'n')));
    CHECK(rejection(std::string(201, 'n')) ==
          "lock name is 201 characters long; at most 200 are allowed");
    CHECK(rejection(std::string(5000, 'n')) ==
          "lock name is 5000 characters long; at most 200 are allowed");
}

TEST_CASE("a printable character outside the allowed set is named in quotes") {
    CHECK(rejection("a*b") == "invalid lock name 'a*b': '*' is not allowed " + k_allowed_hint);
    CHECK(rejection("x{y}") == "invalid lock name 'x{y}': '{' is not allowed " + k_allowed_hint);
    CHECK(rejection("$HOME") == "invalid lock name '$HOME': '$' is not allowed " + k_allowed_hint);
}

TEST_CASE("a space in a lock name is named as its byte value") {
    CHECK(rejection("my lock") ==
          "invalid lock name 'my lock': byte 0x20 is not allowed " + k_allowed_hint);
}

TEST_CASE("a lock name with a control character is not echoed back") {
    CHECK(rejection("a\nb") ==
          "invalid lock name '...': byte 0x0a is not allowed " + k_allowed_hint);
    CHECK(rejection("tab\there") ==
          "invalid lock name '...': byte 0x09 is not allowed " + k_allowed_hint);
    CHECK(rejection(std::string("nul\0x", 5)) ==
          "invalid lock name '...': byte 0x00 is not allowed " + k_allowed_hint);
}

TEST_CASE("a lock name whose first bad character is printable still never echoes a newline") {
    // The message is one line on stderr: a later control character must not split it.
    auto message = rejection("a b\nforged line");
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.find('\r') == std::string::npos);
}

TEST_CASE("a non-ASCII lock name is refused at its first byte") {
    CHECK(rejection("caf\xc3\xa9") ==
          "invalid lock name '...': byte 0xc3 is not allowed " + k_allowed_hint);
    CHECK(rejection("\xe2\x9c\x93") ==
          "invalid lock name '...': byte 0xe2 is not allowed " + k_allowed_hint);
}
