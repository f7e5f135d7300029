#pragma once
// Counts that a server or another client wrote (a counter in a hash, an integer reply),
// believed only from 0 to 2^53: what a double holds exactly (Prometheus keeps every sample
// as one), and far enough from 2^63 that sums of them cannot overflow. Times have their
// own rule (util/timestamp.hpp, plausible_ms).

#include <algorithm>
#include <optional>

namespace redlock::util {

inline constexpr long long k_max_count = 1LL << 53;

// `n`, or nullopt (unknown) when it is no count.
[[nodiscard]] constexpr std::optional<long long> plausible_count(long long n) {
    if (n < 0 || n > k_max_count)
        return std::nullopt;
    return n;
}

// a + b, saturating at k_max_count (and each taken as at least 0): a sum of counts is one.
[[nodiscard]] constexpr long long add_counts(long long a, long long b) {
    return std::min(std::clamp(a, 0LL, k_max_count) + std::clamp(b, 0LL, k_max_count), k_max_count);
}

} // namespace redlock::util
