#include <array>
#include <string>
#include <string_view>

#include <doctest/doctest.h>

#include "util/text.hpp"

using namespace std::string_literals;
using redlock::util::clip;
using redlock::util::closest_word;
using redlock::util::printable;
using redlock::util::skip_blanks;
using redlock::util::utf8_sequence_length;

TEST_CASE("utf8_sequence_length accepts well-formed sequences of every length") {
    CHECK(utf8_sequence_length("a", 0) == 1);
    CHECK(utf8_sequence_length("\xc3\xa9", 0) == 2);         // é
    CHECK(utf8_sequence_length("\xe2\x82\xac", 0) == 3);     // €
    CHECK(utf8_sequence_length("\xf0\x9f\x94\x92", 0) == 4); // U+1F512
    CHECK(utf8_sequence_length("\xf4\x8f\xbf\xbf", 0) == 4); // U+10FFFF
}

TEST_CASE("utf8_sequence_length refuses stray, overlong, surrogate and cut sequences") {
    CHECK(utf8_sequence_length("\xff", 0) == 0);
    CHECK(utf8_sequence_length("\xfe", 0) == 0);
    CHECK(utf8_sequence_length("\x80", 0) == 0);             // a lone continuation byte
    CHECK(utf8_sequence_length("\xc0\xaf", 0) == 0);         // overlong '/'
    CHECK(utf8_sequence_length("\xe0\x80\xaf", 0) == 0);     // overlong '/'
    CHECK(utf8_sequence_length("\xed\xa0\x80", 0) == 0);     // surrogate U+D800
    CHECK(utf8_sequence_length("\xf4\x90\x80\x80", 0) == 0); // beyond U+10FFFF
    CHECK(utf8_sequence_length("\xe2\x82", 0) == 0);         // cut short
    CHECK(utf8_sequence_length("\xc3"
                               "a",
                               0) == 0);
}

TEST_CASE("printable escapes what a terminal would act on and keeps the rest") {
    CHECK(printable("sleep 5") == "sleep 5");
    CHECK(printable("caf\xc3\xa9 \xe2\x82\xac") == "caf\xc3\xa9 \xe2\x82\xac");
    CHECK(printable("a\nb\r\tc") == "a\\nb\\r\\tc");
    CHECK(printable("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m");
    CHECK(printable("\x7f\x01"s + '\0') == "\\x7f\\x01\\x00");
    CHECK(printable("\xc2\x9b"
                    "2J") == "\\u009b2J"); // C1 CSI
    CHECK(printable("back\\slash") == "back\\slash");
}

TEST_CASE("printable shows bytes that are not UTF-8 as hex escapes") {
    CHECK(printable("\xff\xfe") == "\\xff\\xfe");
    CHECK(printable("\xff\x01tok") == "\\xff\\x01tok");
    CHECK(printable("x\xc3") == "x\\xc3");
}

TEST_CASE("a forged line in a command stays on its own line") {
    auto shown = printable("sleep 1\n  token     forged");
    CHECK(shown.find('\n') == std::string::npos);
}

TEST_CASE("clip cuts at a character boundary and marks the cut") {
    CHECK(clip("short", 10) == "short");
    CHECK(clip("abcdefgh", 5) == "abcd~");
    // "é" is two bytes: cutting after its first byte would leave invalid UTF-8.
    CHECK(clip("abc\xc3\xa9xyz", 5) == "abc~");
    CHECK(clip("abc\xc3\xa9xyz", 6) == "abc\xc3\xa9~");
}

TEST_CASE("skip_blanks passes spaces and tabs only") {
    CHECK(skip_blanks("  \t x", 0) == 4);
    CHECK(skip_blanks("a  b", 1) == 3);
    CHECK(skip_blanks("a\nb", 1) == 1);
    CHECK(skip_blanks("a  ", 1) == 3);
    CHECK(skip_blanks("", 0) == 0);
}

TEST_CASE("closest_word names a likely typo, never a far or shorter word") {
    using namespace std::string_view_literals;
    constexpr std::array known = {"name"sv, "timeout"sv, "jitter"sv};
    CHECK(closest_word("nmae", known) == "name");
    CHECK(closest_word("timout", known) == "timeout");
    CHECK(closest_word("colour", known) == std::nullopt);
    CHECK(closest_word("x", known) == std::nullopt);
}
