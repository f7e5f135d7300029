#pragma once
// PROGRAM under the lease: renewals every ttl/3 (retried quickly when they fail), signals
// to redlock passed on to PROGRAM, job control on a terminal, and the stops: a lost lease
// (TERM at validity end - ttl/3, KILL at validity end - ttl/10, so PROGRAM is gone before
// the lease can expire), --max-hold, a dead watchdog, processes PROGRAM left behind. Returns
// once PROGRAM and everything it started are gone.

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "job/events.hpp"
#include "lock/holder.hpp"
#include "lock/lock.hpp"
#include "process/child.hpp"
#include "process/signals.hpp"
#include "process/watchdog.hpp"

namespace redlock::job {

// When PROGRAM is stopped on a lost lease, relative to the end of the lease's validity:
// TERM `grace` before it, KILL `kill_margin` before it, so PROGRAM is gone by the time the
// lease can expire on the servers. The watchdog keeps the same schedule.
struct StopSchedule {
    explicit StopSchedule(Millis ttl)
        : grace(std::max<Millis>(ttl / 3, Millis(1))),
          kill_margin(std::clamp<Millis>(ttl / 10, Millis(1), Millis(1000))) {}
    [[nodiscard]] Clock::time_point term_at(Clock::time_point validity_end) const {
        return validity_end - grace;
    }
    [[nodiscard]] Clock::time_point kill_at(Clock::time_point validity_end) const {
        return validity_end - kill_margin;
    }
    // Between TERM and KILL when PROGRAM is stopped with the lease still held (--max-hold,
    // leftovers, a dead watchdog).
    [[nodiscard]] Millis stop_grace() const { return std::min<Millis>(grace, Millis(5000)); }

    Millis grace;       // between SIGTERM and the latest SIGKILL
    Millis kill_margin; // how long before the lease can expire PROGRAM must be gone
};

// Renewals: every ttl/3, retried every ttl/10 (10 ms to 1 s) after a failure.
struct RenewalSchedule {
    explicit RenewalSchedule(Millis ttl)
        : interval(std::max<Millis>(ttl / 3, Millis(1))),
          retry(std::clamp<Millis>(ttl / 10, Millis(10), Millis(1000))) {}
    // When the renewal after one at `now` goes: `interval` later, but always well before
    // the TERM deadline (`term_at`), even when a slow acquisition ate into the lease, and
    // at least two round trips before it: a renewal's validity counts from when it was
    // sent, so sending early costs nothing, and with round trips near the TTL renewals
    // simply follow each other.
    [[nodiscard]] Clock::time_point next(Clock::time_point now, Clock::time_point term_at,
                                         Clock::duration round_trip) const {
        const auto lead = std::max<Clock::duration>(interval / 2, 2 * round_trip);
        return std::min(now + interval, term_at - lead);
    }

    Millis interval;
    Millis retry;
};

struct Supervised {
    enum class End {
        exited,   // PROGRAM exited by itself: wait_status
        lost,     // the lease was lost and PROGRAM stopped
        max_hold, // --max-hold ran out and PROGRAM stopped
        stopped,  // PROGRAM stopped because redlock could no longer guard it (internal)
    } end = End::exited;
    int wait_status = 0;
    // lost: who released the lock by force, when the notice said.
    std::optional<lock::Holder> forced_by{};
    // The last signal passed on to PROGRAM (0: none): a cron slot stopped by its daemon
    // ends as interrupted.
    int forwarded = 0;
};

// Supervises the running `child` under `lock`'s lease until its whole tree is gone. The
// watchdog is left armed: the caller disarms it once PROGRAM's cgroup is removed.
[[nodiscard]] Supervised supervise(lock::Lock& lock, process::Child& child,
                                   process::SignalEvents& signals, process::Watchdog& watchdog,
                                   std::string name, std::optional<Millis> max_hold,
                                   Observer& observer);

} // namespace redlock::job
