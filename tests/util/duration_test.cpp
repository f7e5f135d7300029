#include <doctest/doctest.h>

#include "util/duration.hpp"

using redlock::util::duration_from_seconds;
using redlock::util::ErrorKind;
using redlock::util::format_duration;
using redlock::util::Millis;
using redlock::util::parse_duration;

namespace {

std::string error_of(std::string_view text) {
    auto result = parse_duration(text);
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == ErrorKind::usage);
    return result.error().message;
}

} // namespace

TEST_CASE("a duration takes the units ms, s, m, h and d") {
    CHECK(parse_duration("250ms") == Millis{250});
    CHECK(parse_duration("30s") == Millis{30'000});
    CHECK(parse_duration("5m") == Millis{300'000});
    CHECK(parse_duration("2h") == Millis{7'200'000});
    CHECK(parse_duration("1d") == Millis{86'400'000});
}

TEST_CASE("a bare number is a number of seconds") {
    CHECK(parse_duration("30") == Millis{30'000});
    CHECK(parse_duration("1.5") == Millis{1'500});
}

TEST_CASE("a duration may have a fraction") {
    CHECK(parse_duration("0.25s") == Millis{250});
    CHECK(parse_duration("1.5m") == Millis{90'000});
    CHECK(parse_duration("0.5h") == Millis{1'800'000});
}

TEST_CASE("a duration is rounded to the nearest millisecond") {
    CHECK(parse_duration("0.0004") == Millis{0});
    CHECK(parse_duration("0.0006") == Millis{1});
    CHECK(parse_duration("1.5ms") == Millis{2});
    CHECK(parse_duration("0.0005") == Millis{1}); // half up
    CHECK(parse_duration("0.00049999999999") == Millis{0});
}

TEST_CASE("a duration's fraction is exact, however many digits it has") {
    // No binary fraction in between: 0.1 is 100ms, 4.35 is 4350ms (4349.999... in a double).
    CHECK(parse_duration("0.1") == Millis{100});
    CHECK(parse_duration("4.35") == Millis{4'350});
    CHECK(parse_duration("0.001") == Millis{1});
    CHECK(parse_duration("2.0000000001") == Millis{2'000});
    CHECK(parse_duration("1.99999999999999999999") == Millis{2'000});
    CHECK(parse_duration("0.000000000000000000001d") == Millis{0});
    CHECK(parse_duration("0000030") == Millis{30'000});
    CHECK(parse_duration("0.123456789123h") == Millis{444'444});
    CHECK(parse_duration("8759.9999999h") == Millis{31'536'000'000});
    // 0.0000000059d is 0.50976ms: a digit past the ninth still decides the rounding.
    CHECK(parse_duration("0.0000000059d") == Millis{1});
    CHECK(parse_duration("0.0000000057870d") == Millis{0}); // 0.49999...ms
}

TEST_CASE("zero is a valid duration") {
    CHECK(parse_duration("0") == Millis{0});
    CHECK(parse_duration("0s") == Millis{0});
    CHECK(parse_duration("0ms") == Millis{0});
}

TEST_CASE("a malformed duration is a usage error that quotes it") {
    CHECK(error_of("abc") == "invalid duration 'abc': expected a number with an optional unit "
                             "ms, s, m, h or d (e.g. 250ms, 30s, 5m)");
    for (std::string_view text : {"", "-1", "-1s", "+1", "1x", "30 s", " 30s", "30s ", "1.", ".5",
                                  "1e3", "inf", "nan", "0x10", "s", "1.5.5", "1sec", "5M", "1,5"}) {
        CAPTURE(text);
        CHECK(error_of(text) == "invalid duration '" + std::string(text) +
                                    "': expected a number with an optional unit ms, s, m, h or d "
                                    "(e.g. 250ms, 30s, 5m)");
    }
}

TEST_CASE("a duration longer than a year is refused") {
    CHECK(parse_duration("8760h") == Millis{31'536'000'000});
    CHECK(error_of("8761h") == "invalid duration '8761h': must be at most a year (8760h)");
    CHECK(error_of("8760.0001h") ==
          "invalid duration '8760.0001h': must be at most a year (8760h)");
    CHECK(error_of("365.5d") == "invalid duration '365.5d': must be at most a year (8760h)");
    CHECK(error_of("99999999999999999999999999") ==
          "invalid duration '99999999999999999999999999': must be at most a year (8760h)");
}

TEST_CASE("a number of seconds from the config becomes a duration") {
    CHECK(duration_from_seconds(30) == Millis{30'000});
    CHECK(duration_from_seconds(0.25) == Millis{250});
    CHECK(duration_from_seconds(0) == Millis{0});
    CHECK(duration_from_seconds(0.0004) == Millis{0}); // rounded, half up
    CHECK(duration_from_seconds(0.0025) == Millis{3});
    CHECK(duration_from_seconds(31'536'000) == Millis{31'536'000'000});
}

TEST_CASE("a negative, infinite or huge number of seconds is refused") {
    auto negative = duration_from_seconds(-1);
    REQUIRE_FALSE(negative);
    CHECK(negative.error().kind == ErrorKind::usage);
    CHECK(negative.error().message ==
          "invalid duration -1: expected a non-negative number of seconds");
    CHECK_FALSE(duration_from_seconds(std::numeric_limits<double>::infinity()));
    CHECK_FALSE(duration_from_seconds(std::numeric_limits<double>::quiet_NaN()));
    auto huge = duration_from_seconds(1e10);
    REQUIRE_FALSE(huge);
    CHECK(huge.error().message == "invalid duration 10000000000: must be at most a year (8760h)");
}

TEST_CASE("a refused number of seconds is quoted in the shortest text that reads back") {
    auto message = [](double seconds) { return duration_from_seconds(seconds).error().message; };
    CHECK(message(-1.5) == "invalid duration -1.5: expected a non-negative number of seconds");
    CHECK(message(-(0.1 + 0.2)) ==
          "invalid duration -0.30000000000000004: expected a non-negative number of seconds");
    CHECK(message(1e20) == "invalid duration 1e+20: must be at most a year (8760h)");
    CHECK(message(std::numeric_limits<double>::infinity()) ==
          "invalid duration inf: expected a non-negative number of seconds");
}

TEST_CASE("a duration is formatted in the largest unit that keeps it exact") {
    CHECK(format_duration(Millis{0}) == "0s");
    CHECK(format_duration(Millis{250}) == "250ms");
    CHECK(format_duration(Millis{1'000}) == "1s");
    CHECK(format_duration(Millis{1'500}) == "1.5s");
    CHECK(format_duration(Millis{1'001}) == "1.001s");
    CHECK(format_duration(Millis{1'050}) == "1.05s");
    CHECK(format_duration(Millis{30'000}) == "30s");
    CHECK(format_duration(Millis{90'000}) == "90s");
    CHECK(format_duration(Millis{300'000}) == "5m");
    CHECK(format_duration(Millis{7'200'000}) == "2h");
    CHECK(format_duration(Millis{5'400'000}) == "90m");
    CHECK(format_duration(Millis{86'400'000}) == "1d");
    CHECK(format_duration(Millis{90'000'000}) == "25h");
    CHECK(format_duration(Millis{-1'500}) == "-1.5s");
}

TEST_CASE("a formatted duration parses back to the same value") {
    for (long ms : {0L, 1L, 250L, 999L, 1'000L, 1'001L, 61'500L, 300'000L, 7'200'000L}) {
        CAPTURE(ms);
        CHECK(parse_duration(format_duration(Millis{ms})) == Millis{ms});
    }
}
