#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include "redis/reader.hpp"

using redlock::redis::k_max_line_bytes;
using redlock::redis::k_max_reply_bytes;
using redlock::redis::k_max_reply_elements;
using redlock::redis::Reader;

namespace {

// Feeds `bytes` in pieces of at most `piece` bytes, taking every reply as it ends, as a
// connection does. Returns how many replies came, or the error that stopped the reader.
struct Result {
    size_t replies = 0;
    std::string error;
};

Result read_all(Reader& reader, std::string_view bytes, size_t piece = 16384) {
    Result result;
    for (size_t at = 0; at < bytes.size() && result.error.empty(); at += piece) {
        if (auto fed = reader.feed(bytes.substr(at, piece)); !fed) {
            result.error = fed.error();
            break;
        }
        for (;;) {
            auto reply = reader.next();
            if (!reply) {
                result.error = reply.error();
                break;
            }
            if (!*reply)
                break;
            ++result.replies;
        }
    }
    return result;
}

std::string repeat(std::string_view s, size_t n) {
    std::string out;
    out.reserve(s.size() * n);
    for (size_t i = 0; i < n; ++i)
        out += s;
    return out;
}

} // namespace

TEST_CASE("the reader returns replies as hiredis builds them") {
    Reader reader;
    REQUIRE(reader.feed("+OK\r\n:42\r\n$3\r\nabc\r\n*2\r\n$1\r\na\r\n$-1\r\n-ERR no\r\n"));
    auto status = reader.next();
    REQUIRE(status);
    REQUIRE(*status);
    CHECK((*status)->type == REDIS_REPLY_STATUS);
    auto integer = reader.next();
    REQUIRE((integer && *integer));
    CHECK((*integer)->integer == 42);
    auto bulk = reader.next();
    REQUIRE((bulk && *bulk));
    CHECK(redlock::redis::text(**bulk) == "abc");
    auto array = reader.next();
    REQUIRE((array && *array));
    REQUIRE((*array)->elements == 2);
    CHECK(redlock::redis::text(*(*array)->element[0]) == "a");
    CHECK((*array)->element[1]->type == REDIS_REPLY_NIL);
    auto error = reader.next();
    REQUIRE((error && *error));
    CHECK(redlock::redis::describe(**error) == "ERR no");
    auto none = reader.next();
    REQUIRE(none);
    CHECK_FALSE(*none);
    CHECK(reader.pending() == 0);
}

TEST_CASE("an array header claiming 2^31-1 elements is refused before any allocation") {
    Reader reader;
    // Followed by elements, as a hostile server would send them.
    auto result = read_all(reader, "*2147483647\r\n" + repeat(":1\r\n", 1000));
    CHECK(result.replies == 0);
    CHECK(result.error == "reply too large: array of 2147483647 elements");
    // The reader is of no further use.
    CHECK_FALSE(reader.feed("+OK\r\n"));
    CHECK_FALSE(reader.next());
}

TEST_CASE("the elements of nested arrays count together against the limit") {
    Reader reader;
    // Each header alone is within the limit; their sum is not.
    auto result = read_all(reader, repeat("*40000\r\n", 3));
    CHECK(result.error == "reply too large: more than 65536 array elements in all");
}

TEST_CASE("an array as large as the limit is read, and the next reply starts afresh") {
    Reader reader;
    const std::string page = "*" + std::to_string(k_max_reply_elements) + "\r\n" +
                             repeat(":1\r\n", k_max_reply_elements);
    auto result = read_all(reader, page + page);
    CHECK(result.error.empty());
    CHECK(result.replies == 2);
}

TEST_CASE("a bulk string header claiming 2^31 bytes is refused at once") {
    Reader reader;
    auto result = read_all(reader, "$2147483648\r\n" + std::string(1000, 'x'));
    CHECK(result.error == "reply too large: bulk string of 2147483648 bytes");
    // So is one whose digits alone are already past the limit, before its line ends.
    Reader early;
    CHECK(read_all(early, "*1\r\n$99999999").error ==
          "reply too large: bulk string of 99999999 bytes");
    Reader absurd;
    CHECK(read_all(absurd, "$99999999999999999999999999").error ==
          "reply too large: bulk string of 18446744073709551615 bytes");
}

TEST_CASE("a bulk string within the limit is read whole") {
    Reader reader;
    const std::string value(k_max_reply_bytes - 100, 'v');
    const std::string bytes = "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n";
    auto result = read_all(reader, bytes);
    CHECK(result.error.empty());
    CHECK(result.replies == 1);
}

TEST_CASE("a reply that goes on past the byte limit without ending is refused") {
    Reader reader;
    // Many small elements of one array: none claims much, together they do.
    const std::string bytes =
        "*60000\r\n" + repeat("$100\r\n" + std::string(100, 'x') + "\r\n", 60000);
    auto result = read_all(reader, bytes);
    CHECK(result.error ==
          "reply too large: more than " + std::to_string(k_max_reply_bytes) + " bytes");
}

TEST_CASE("the bytes of replies that ended do not count against the next one") {
    Reader reader;
    const std::string one_mb = "$1000000\r\n" + std::string(1'000'000, 'x') + "\r\n";
    auto result = read_all(reader, repeat(one_mb, 10));
    CHECK(result.error.empty());
    CHECK(result.replies == 10);
}

TEST_CASE("a status line that never ends is refused past the line limit") {
    Reader reader;
    auto result = read_all(reader, "+" + std::string(k_max_line_bytes + 1, 'x'));
    CHECK(result.error == "reply too large: a line of more than 65536 bytes");
}

TEST_CASE("arrays nested deeper than hiredis supports are a protocol error") {
    Reader reader;
    auto result = read_all(reader, repeat("*1\r\n", 1'000'000));
    CHECK(result.replies == 0);
    CHECK(result.error == "No support for nested multi bulk replies with depth > 7");
    // Seven levels are fine.
    Reader seven;
    auto ok = read_all(seven, repeat("*1\r\n", 7) + ":1\r\n");
    CHECK(ok.error.empty());
    CHECK(ok.replies == 1);
}

TEST_CASE("bytes that are not RESP are a protocol error") {
    Reader reader;
    auto result = read_all(reader, "HTTP/1.1 400 Bad Request\r\n");
    CHECK(result.error == "Protocol error, got \"H\" as reply type byte");
}

TEST_CASE("a bulk string past the pass-over length is dropped as it comes and read as nil") {
    // Two messages of a subscription around one of 20 MB (past the 4 MB a reply may take):
    // whatever the pieces the bytes come in, three replies, the large payload a nil.
    auto message = [](std::string_view payload) {
        return "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$" + std::to_string(payload.size()) + "\r\n" +
               std::string(payload) + "\r\n";
    };
    const std::string large(20 << 20, 'x');
    const std::string bytes = message("released 1") + message(large) + message("released 2");
    for (size_t piece : {size_t{1} << 20, size_t{4096}, size_t{61}}) {
        CAPTURE(piece);
        Reader reader;
        reader.pass_over_bulks_longer_than(65536);
        std::vector<std::string> payloads;
        size_t most_pending = 0;
        for (size_t at = 0; at < bytes.size(); at += piece) {
            if (!reader.feed(std::string_view(bytes).substr(at, piece)))
                FAIL("refused at byte ", at);
            most_pending = std::max(most_pending, reader.pending());
            for (;;) {
                auto reply = reader.next();
                REQUIRE(reply);
                if (!*reply)
                    break;
                REQUIRE((*reply)->elements == 3);
                const auto& payload = *(*reply)->element[2];
                payloads.emplace_back(
                    payload.type == REDIS_REPLY_NIL ? "nil" : redlock::redis::text(payload));
            }
        }
        CHECK(payloads == std::vector<std::string>{"released 1", "nil", "released 2"});
        CHECK(most_pending <= std::max(piece, size_t{65536}) + 64); // never held whole
        CHECK(reader.pending() == 0);
    }
}

TEST_CASE("without pass-over a bulk string past the byte limit is still refused") {
    Reader reader;
    auto result = read_all(reader, "$" + std::to_string(k_max_reply_bytes + 1) + "\r\n");
    CHECK(result.error ==
          "reply too large: bulk string of " + std::to_string(k_max_reply_bytes + 1) + " bytes");
}
