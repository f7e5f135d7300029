#include "util/random.hpp"

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <sys/random.h>

namespace redlock::util {

namespace {
void fill_random(void* buffer, size_t size) {
    auto* p = static_cast<unsigned char*>(buffer);
    while (size > 0) {
        ssize_t n = ::getrandom(p, size, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
        }
        p += n;
        size -= static_cast<size_t>(n);
    }
}
} // namespace

std::string random_token() {
    std::array<unsigned char, 16> bytes{};
    fill_random(bytes.data(), bytes.size());
    static constexpr char k_hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char b : bytes) {
        out.push_back(k_hex[b >> 4]);
        out.push_back(k_hex[b & 0xf]);
    }
    return out;
}

namespace {

// A uniformly random duration in [low, high], in any unit.
template <typename Duration>
Duration uniform_between(Duration low, Duration high) {
    if (high <= low)
        return low;
    uint64_t r = 0;
    fill_random(&r, sizeof r);
    auto span = static_cast<uint64_t>((high - low).count()) + 1;
    return low + Duration(static_cast<typename Duration::rep>(r % span));
}

} // namespace

std::chrono::milliseconds random_between(std::chrono::milliseconds low,
                                         std::chrono::milliseconds high) {
    return uniform_between(low, high);
}

std::chrono::microseconds random_between(std::chrono::microseconds low,
                                         std::chrono::microseconds high) {
    return uniform_between(low, high);
}

size_t random_index(size_t n) {
    uint64_t r = 0;
    fill_random(&r, sizeof r);
    return static_cast<size_t>(r % n);
}

} // namespace redlock::util
