#include <chrono>

#include <doctest/doctest.h>

#include "util/timestamp.hpp"

using namespace std::chrono;
using redlock::util::parse_utc_timestamp;
using redlock::util::UtcMillis;

TEST_CASE("parse_utc_timestamp reads what redlock writes") {
    auto t = parse_utc_timestamp("2026-12-02T14:16:33.620Z");
    REQUIRE(t);
    CHECK(*t == UtcMillis{sys_days{2026y / December / 2}} + 14h + 16min + 33s + 620ms);
    CHECK(parse_utc_timestamp("1970-01-01T00:00:00Z") == UtcMillis{});
    CHECK(parse_utc_timestamp("1970-01-01T00:00:00.5Z") == UtcMillis{500ms});
    CHECK(parse_utc_timestamp("1970-01-01T00:00:00.123456789Z") == UtcMillis{123ms});
}

TEST_CASE("parse_utc_timestamp refuses garbage and dates that do not exist") {
    for (const char* text :
         {"9999-99-99T99:99:99.999Z", "2026-02-30T00:00:00.000Z", "2026-13-01T00:00:00.000Z",
          "2026-12-02T24:00:00.000Z", "2026-12-02T23:60:00.000Z", "2026-12-02T23:59:61.000Z",
          "2026-12-02T14:16:33.620", "2026-12-02 14:16:33.620Z", "2026-12-02T14:16:33.Z",
          "2026-12-02T14:16:33.1234567890Z", "+2026-12-02T14:16:33Z", "-001-12-02T14:16:33Z",
          "2026-12-02T14:16:33.620Zjunk", "", "garbage", "2026-1-2T1:2:3Z"}) {
        CAPTURE(text);
        CHECK_FALSE(parse_utc_timestamp(text));
    }
}

TEST_CASE("parse_utc_timestamp handles the far ends of the range without overflow") {
    auto last = parse_utc_timestamp("9999-12-31T23:59:60.999Z");
    REQUIRE(last);
    CHECK(*last > UtcMillis{sys_days{2262y / January / 1}}); // beyond system_clock's ns
    CHECK(parse_utc_timestamp("0000-01-01T00:00:00.000Z"));
}

TEST_CASE("plausible_ms believes 1970 to 9999 and nothing else") {
    using redlock::util::k_max_unix_ms;
    using redlock::util::plausible_ms;
    CHECK(plausible_ms(0LL) == 0);
    CHECK(plausible_ms(k_max_unix_ms) == k_max_unix_ms);
    CHECK_FALSE(plausible_ms(-1LL));
    CHECK_FALSE(plausible_ms(k_max_unix_ms + 1));
    CHECK_FALSE(plausible_ms(std::optional<long long>()));
    // The last believable time formats as the last millisecond of 9999.
    CHECK(redlock::util::format_utc_timestamp(UtcMillis{milliseconds(k_max_unix_ms)}) ==
          "9999-12-31T23:59:59.999Z");
}

TEST_CASE("format_utc_timestamp writes every field zero-padded, and parses back") {
    using redlock::util::format_utc_timestamp;
    CHECK(format_utc_timestamp(UtcMillis{}) == "1970-01-01T00:00:00.000Z");
    const auto t = UtcMillis{sys_days{2026y / March / 2}} + 4h + 5min + 6s + 7ms;
    CHECK(format_utc_timestamp(t) == "2026-03-02T04:05:06.007Z");
    CHECK(parse_utc_timestamp(format_utc_timestamp(t)) == t);
    CHECK(format_utc_timestamp(UtcMillis{sys_days{1999y / December / 31}} + 23h + 59min + 59s +
                               999ms) == "1999-12-31T23:59:59.999Z");
    // Outside 0-9999, as printf writes it.
    CHECK(format_utc_timestamp(UtcMillis{sys_days{10000y / January / 1}}) ==
          "10000-01-01T00:00:00.000Z");
}
