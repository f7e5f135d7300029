#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include <doctest/doctest.h>

#include "util/sha1.hpp"

using redlock::util::sha1_hex;
using redlock::util::Sha1Hex;

namespace {
std::string text(const Sha1Hex& digest) {
    return {digest.begin(), digest.end()};
}

// 1 KB of every byte value, high ones included (they must be read as unsigned).
constexpr std::array<char, 1024> k_kilobyte = [] {
    std::array<char, 1024> out{};
    for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = static_cast<char>(static_cast<unsigned char>((i * 7 + 3) % 256));
    return out;
}();
constexpr std::string_view k_kilobyte_view{k_kilobyte.data(), k_kilobyte.size()};
} // namespace

// The digests below are FIPS 180-4's examples and Python's hashlib.sha1 of the same input.
// Each is computed by the compiler (a constexpr variable), as lock/scripts.hpp does.
TEST_CASE("sha1_hex gives the known digests when computed by the compiler") {
    constexpr Sha1Hex empty = sha1_hex("");
    constexpr Sha1Hex abc = sha1_hex("abc");
    constexpr Sha1Hex two_blocks =
        sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq");
    constexpr Sha1Hex kilobyte = sha1_hex(k_kilobyte_view);
    CHECK(text(empty) == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    CHECK(text(abc) == "a9993e364706816aba3e25717850c26c9cd0d89d");
    CHECK(text(two_blocks) == "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    CHECK(text(kilobyte) == "d48dd3c1eeccad4e67ba2fb337a050a6cb306f44");
    static_assert(sha1_hex("abc")[0] == 'a' && sha1_hex("abc")[39] == 'd');
}

TEST_CASE("sha1_hex pads correctly around the block boundaries") {
    // 55 bytes still fit the length in their block, 56 do not; 64 is one whole block.
    const std::array<std::pair<std::size_t, std::string_view>, 7> cases{{
        {55, "c1c8bbdc22796e28c0e15163d20899b65621d65a"},
        {56, "c2db330f6083854c99d4b5bfb6e8f29f201be699"},
        {63, "03f09f5b158a7a8cdad920bddc29b81c18a551f5"},
        {64, "0098ba824b5c16427bd7a1122a5a442a25ec644d"},
        {65, "11655326c708d70319be2610e8a57d9a5b959d3b"},
        {119, "ee971065aaa017e0632a8ca6c77bb3bf8b1dfc56"},
        {120, "f34c1488385346a55709ba056ddd08280dd4c6d6"},
    }};
    for (const auto& [length, digest] : cases) {
        CAPTURE(length);
        CHECK(text(sha1_hex(std::string(length, 'a'))) == digest);
    }
}

TEST_CASE("sha1_hex gives the same digest at run time as at compile time") {
    constexpr Sha1Hex at_compile_time = sha1_hex(k_kilobyte_view);
    const std::string copy(k_kilobyte_view);
    CHECK(sha1_hex(copy) == at_compile_time);
}
