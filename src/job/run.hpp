#pragma once
// A whole `redlock run`: a nested run under the outer lock, or start the watchdog with the
// run's will (job/will.hpp: what it frees if redlock dies), acquire (job/acquire.hpp),
// claim the --once-per slot, start PROGRAM (in a cgroup of its own where one can be made),
// supervise it under the lease (job/supervise.hpp), and release, or keep the lock for the
// rest of --min-hold. Returns how it ended, as a value; cli/ turns that
// into the exit status.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "job/acquire.hpp"
#include "job/cron_slot.hpp"
#include "job/events.hpp"
#include "util/error.hpp"

namespace redlock::job {

struct RunSpec {
    std::string name; // the lock's name (validated)
    Millis ttl{30000};
    WaitPolicy wait;
    std::vector<std::string> program; // PROGRAM and its arguments
    // --max-hold: PROGRAM is stopped once it has run this long.
    std::optional<Millis> max_hold;
    // --min-hold: the lock stays held at least this long after acquiring.
    std::optional<Millis> min_hold;
    // --once-per: at most one run of NAME per slot of this length, on the servers' clock.
    std::optional<Millis> once_per;
    size_t limit = 1; // --limit: holders at once (a semaphore above 1)
    // A `redlock cron` slot (job/cron_slot.hpp): taken in place of a plain acquisition.
    std::optional<CronSlot> cron;
    // Where the run's end is reported if redlock dies (its will, job/will.hpp): the
    // metrics file and the --events FILE, absolute paths (empty: none).
    std::string metrics_file;
    std::string events_file;
};

struct RunResult {
    Outcome outcome = Outcome::failed;
    int program_status = 0;             // ran, lost, max_hold, stopped: PROGRAM's (or 128+N)
    int signal = 0;                     // interrupted: the signal
    std::optional<util::Error> error{}; // failed: why
    // A cron slot's run: who ran the slot instead (skipped_slot, when known), and the
    // slots before it that it recorded missed.
    std::string slot_by{};
    size_t slots_missed = 0;
};

[[nodiscard]] RunResult run(const RunSpec& spec, const config::Config& config, Observer& observer);

} // namespace redlock::job
