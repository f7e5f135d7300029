#pragma once
// steady_clock helpers for poll() loops.

#include <algorithm>
#include <chrono>

namespace redlock::util {

using SteadyClock = std::chrono::steady_clock;

// Milliseconds from `now` until `until` for poll(): rounded up so a wake-up is never early,
// 0 when already due, capped at a minute.
[[nodiscard]] inline int poll_timeout_ms(SteadyClock::time_point now,
                                         SteadyClock::time_point until) {
    if (until <= now)
        return 0;
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
    return static_cast<int>(std::min<long long>(ms, 60'000));
}

} // namespace redlock::util
