#pragma once
// SHA-1 (FIPS 180-4) as a constexpr function, so that the digest of text known when
// compiling is computed by the compiler: Redis names a Lua script by the SHA1 of its
// source (EVALSHA), and lock/scripts.hpp derives each script's name from its text this way.
// Not for anything secret: SHA-1 is broken as a cryptographic hash.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace redlock::util {

// 40 lowercase hex digits, as Redis's SCRIPT LOAD returns them.
using Sha1Hex = std::array<char, 40>;

[[nodiscard]] constexpr Sha1Hex sha1_hex(std::string_view data) {
    std::array<std::uint32_t, 5> h{0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    // The message, then 0x80, zeros, and its length in bits as 8 big-endian bytes, padded
    // to whole 64-byte blocks.
    const std::size_t blocks = (data.size() + 8) / 64 + 1;
    const std::size_t length_at = blocks * 64 - 8;
    const std::uint64_t bits = static_cast<std::uint64_t>(data.size()) * 8;
    auto byte_at = [&](std::size_t at) -> std::uint32_t {
        if (at < data.size())
            return static_cast<unsigned char>(data[at]);
        if (at == data.size())
            return 0x80;
        if (at >= length_at)
            return static_cast<std::uint32_t>((bits >> (8 * (7 - (at - length_at)))) & 0xff);
        return 0;
    };
    for (std::size_t block = 0; block < blocks; ++block) {
        std::array<std::uint32_t, 80> w{};
        for (std::size_t i = 0; i < 64; ++i)
            w[i / 4] |= byte_at(block * 64 + i) << (8 * (3 - i % 4));
        for (std::size_t i = 16; i < 80; ++i)
            w[i] = std::rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
        auto [a, b, c, d, e] = h;
        for (std::size_t i = 0; i < 80; ++i) {
            std::uint32_t f = 0;
            std::uint32_t k = 0;
            if (i < 20) {
                f = (b & c) | (~b & d);
                k = 0x5A827999;
            } else if (i < 40) {
                f = b ^ c ^ d;
                k = 0x6ED9EBA1;
            } else if (i < 60) {
                f = (b & c) | (b & d) | (c & d);
                k = 0x8F1BBCDC;
            } else {
                f = b ^ c ^ d;
                k = 0xCA62C1D6;
            }
            const std::uint32_t next = std::rotl(a, 5) + f + e + k + w[i];
            e = d;
            d = c;
            c = std::rotl(b, 30);
            b = a;
            a = next;
        }
        h[0] += a;
        h[1] += b;
        h[2] += c;
        h[3] += d;
        h[4] += e;
    }
    constexpr std::string_view k_digits = "0123456789abcdef";
    Sha1Hex out{};
    for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = k_digits[(h[i / 8] >> (4 * (7 - i % 8))) & 0xf];
    return out;
}

} // namespace redlock::util
