#include <string>

#include <doctest/doctest.h>

#include "util/json.hpp"
#include "util/text.hpp"

using namespace std::string_literals;
using redlock::util::json_quote;

namespace {

bool valid_utf8(const std::string& text) {
    for (size_t i = 0; i < text.size();) {
        size_t n = redlock::util::utf8_sequence_length(text, i);
        if (n == 0)
            return false;
        i += n;
    }
    return true;
}

} // namespace

TEST_CASE("json_quote escapes quotes, backslashes and control characters") {
    CHECK(json_quote("plain") == "\"plain\"");
    CHECK(json_quote("a\"b\\c") == "\"a\\\"b\\\\c\"");
    CHECK(json_quote("a\nb\tc\r") == "\"a\\nb\\tc\\r\"");
    CHECK(json_quote("\x1b[31m"s + '\0') == "\"\\u001b[31m\\u0000\"");
}

TEST_CASE("json_quote keeps valid UTF-8 as it is") {
    CHECK(json_quote("caf\xc3\xa9 \xf0\x9f\x94\x92") == "\"caf\xc3\xa9 \xf0\x9f\x94\x92\"");
}

TEST_CASE("json_quote writes each byte that is not UTF-8 as U+FFFD") {
    CHECK(json_quote("\xff\xfe") == "\"\xef\xbf\xbd\xef\xbf\xbd\"");
    CHECK(json_quote("\xff\x01tok") == "\"\xef\xbf\xbd\\u0001tok\"");
    CHECK(json_quote("x\xed\xa0\x80y") == "\"x\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdy\"");
    CHECK(valid_utf8(json_quote("\xc3(\xa0\xa1\xe2\x28\xa1\xf0\x90\x28\xbc")));
}
