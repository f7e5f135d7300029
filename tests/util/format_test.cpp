#include <cstdint>
#include <string>
#include <string_view>

#include <doctest/doctest.h>

#include "util/format.hpp"

using redlock::util::format;

// util::format is {fmt}'s; these pin down the specs redlock's messages use. A malformed
// format string ("a{b", "{} {") no longer compiles.

TEST_CASE("format fills placeholders in order") {
    CHECK(format("{} and {}", "salt", "pepper") == "salt and pepper");
    CHECK(format("{}{}{}", 1, 2, 3) == "123");
    CHECK(format("no placeholders") == "no placeholders");
    CHECK(format("") == "");
    CHECK(format("{}", "") == "");
}

TEST_CASE("format accepts strings of every kind, characters and bools") {
    std::string s = "std";
    std::string_view v = "view";
    CHECK(format("{} {} {}", s, v, "literal") == "std view literal");
    CHECK(format("'{}'", 'x') == "'x'");
    CHECK(format("{} {}", true, false) == "true false");
}

TEST_CASE("format writes integers of every width and signedness in decimal") {
    CHECK(format("{}", 0) == "0");
    CHECK(format("{}", -42) == "-42");
    CHECK(format("{}", static_cast<short>(-7)) == "-7");
    CHECK(format("{}", 42U) == "42");
    CHECK(format("{}", static_cast<size_t>(18446744073709551615ULL)) == "18446744073709551615");
    CHECK(format("{}", static_cast<long long>(-9223372036854775807LL - 1)) ==
          "-9223372036854775808");
    CHECK(format("{}", static_cast<unsigned char>(200)) == "200");
}

TEST_CASE("format turns doubled braces into literal braces") {
    CHECK(format("{{}}") == "{}");
    CHECK(format("{{{}}}", 5) == "{5}");
    CHECK(format("{{{}{}}}:{}", "lock:", "x", "meta") == "{lock:x}:meta");
    CHECK(format("a }} b {{ c") == "a } b { c");
}

TEST_CASE("format takes precision and width for floating point numbers") {
    CHECK(format("{:.1f}", 3.14159) == "3.1");
    CHECK(format("{:.1f}ms", 0.25) == "0.2ms"); // round-half-even of the binary value
    CHECK(format("{:.3f}", 2.0) == "2.000");
    CHECK(format("{:8.2f}", 3.14159) == "    3.14");
    CHECK(format("{:.0f}", 2.5F) == "2");
    CHECK(format("{:e}", 1500.0) == "1.500000e+03");
}

TEST_CASE("format writes a floating point number without a spec in its shortest form") {
    CHECK(format("{}", 1.5) == "1.5");
    CHECK(format("{}", 0.25) == "0.25");
    CHECK(format("{}", 100.0) == "100");
}

TEST_CASE("format takes base, width, fill and alignment for integers") {
    CHECK(format("{:02x}", 10) == "0a");
    CHECK(format("{:02x}", static_cast<unsigned char>(0xc3)) == "c3");
    CHECK(format("{:02x}", 0xabcU) == "abc");
    CHECK(format("{:X}", 255) == "FF");
    CHECK(format("{:5}", 42) == "   42");
    CHECK(format("{:<5}|", 42) == "42   |");
    CHECK(format("{:05}", -42) == "-0042");
    CHECK(format("{:o}", 8) == "10");
    CHECK(format("{:x}", static_cast<uint64_t>(0xdeadbeefcafeULL)) == "deadbeefcafe");
}

TEST_CASE("format mixes types and specs in one string") {
    CHECK(format("byte 0x{:02x} at {} of '{}' took {:.1f}ms: {}", static_cast<unsigned char>(7), 3,
                 std::string("name"), 1.25, true) == "byte 0x07 at 3 of 'name' took 1.2ms: true");
    CHECK(format("only {} of {} servers answered, {} needed ({})", size_t{2}, size_t{5}, size_t{3},
                 "a: down") == "only 2 of 5 servers answered, 3 needed (a: down)");
}
