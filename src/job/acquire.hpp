#pragma once
// How a job gets its lock: attempts, and between them the wait policy. A waiter is woken by
// the release itself (pub/sub notices on two of the servers, the leader first over
// several), sleeps at most until the holder's lease could have run out when no notice
// comes (a holder that died sends none), and over several servers spreads out after a
// notice so that waiters woken together do not split the votes. --fair takes a place in
// the queue first. What happens is reported to the observer (job/events.hpp).

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "job/events.hpp"
#include "lock/lock.hpp"
#include "process/signals.hpp"
#include "util/error.hpp"

namespace redlock::job {

struct WaitPolicy {
    std::optional<Millis> wait; // nullopt: until acquired; 0: a single attempt
    bool fair = false;          // first come, first served among --fair waiters
    // An acquisition leaving less than this of the lease is released and does not count.
    std::optional<Millis> min_validity;
    // A lock found held by this machine under an earlier boot is reaped on the way
    // (lock/reap.hpp), its history entry written with these settings (the config's).
    size_t history_keep = 300;
    Millis history_max_age{std::chrono::hours(24 * 30)};
};

struct Acquisition {
    enum class Outcome { acquired, held, gave_up, interrupted } outcome = Outcome::held;
    int signal = 0; // the forwarded signal that ended the wait
};

// Tries to acquire `lock` under `policy`. A lock (or every permit) found held, the first
// time, is looked at once more: what this machine held under an earlier boot is reaped
// (lock/reap.hpp) and the attempt made again at once. Servers that cannot be reached are never
// waited on: that is an error at once. A forwarded signal (read from `signals`) ends the wait. With
// `skip`, the history entry of a run (lock/history.hpp) that the last attempt records where the
// lock is held, when that attempt is refused: the outcome (skipped-held or gave-up) and the time
// waited are filled in.
[[nodiscard]] util::Expected<Acquisition> acquire(lock::Lock& lock, std::string_view name,
                                                  const WaitPolicy& policy,
                                                  process::SignalEvents& signals,
                                                  Observer& observer,
                                                  const lock::HistoryRecord* skip = nullptr);

// The lock NAME under the config's key prefix, its holder's metadata (`holder`: field/value
// pairs) written with it.
[[nodiscard]] lock::Lock make_lock(const config::Config& config, const std::string& name,
                                   std::string token, Millis ttl,
                                   std::vector<std::string> holder = {});

// The passwords redlock knows of (its servers', and redis-cli's REDISCLI_AUTH), to be
// masked wherever they would be stored or shown.
[[nodiscard]] std::vector<std::string> known_secrets(const config::Config& config);

// "held by another owner"; for a semaphore "held: none of its 3 permits is free".
[[nodiscard]] std::string held_by_others(const lock::Lock& lock);

} // namespace redlock::job
