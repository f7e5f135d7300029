#pragma once
// Randomness from the kernel: lock tokens must be unguessable and unique across hosts.

#include <chrono>
#include <string>

namespace redlock::util {

// 128 random bits from getrandom(2), as 32 lowercase hex digits.
[[nodiscard]] std::string random_token();

// A uniformly random duration in [low, high], for retry jitter.
[[nodiscard]] std::chrono::milliseconds random_between(std::chrono::milliseconds low,
                                                       std::chrono::milliseconds high);
[[nodiscard]] std::chrono::microseconds random_between(std::chrono::microseconds low,
                                                       std::chrono::microseconds high);
// A uniformly random index in [0, n), n > 0.
[[nodiscard]] size_t random_index(size_t n);

} // namespace redlock::util
