#pragma once
// The clock of every lease deadline, and helpers for poll() loops.
//
// A lease runs on the servers' clocks whatever happens to this host, so its deadlines are
// kept on CLOCK_BOOTTIME: monotonic like steady_clock (CLOCK_MONOTONIC), but it also counts
// the time the machine was suspended. After a suspend longer than the lease, redlock (and
// its watchdog) see the lease as gone, as the servers do.

#include <algorithm>
#include <chrono>
#include <ctime>

namespace redlock::util {

struct BootClock {
    using duration = std::chrono::nanoseconds;
    using rep = duration::rep;
    using period = duration::period;
    using time_point = std::chrono::time_point<BootClock>;
    static constexpr bool is_steady = true;

    static time_point now() noexcept {
        timespec ts{};
        ::clock_gettime(CLOCK_BOOTTIME, &ts);
        return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
    }
};

using SteadyClock = BootClock;

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
