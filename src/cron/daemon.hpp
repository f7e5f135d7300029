#pragma once
// `redlock cron FILE`: the daemon every host of a fleet runs on the same crontab. It holds
// no lease itself: at each slot of each job it starts a run of the same binary for that
// slot (job/slot_run.hpp), which takes the job's lock, claims the slot on the servers
// (job/cron_slot.hpp) and runs the command under everything `run` gives, or learns that
// another host has; so one host runs each slot. The daemon reads what its runs print, line
// by line, and says it with the job's name; it logs one line per slot (who ran it, fence,
// outcome).
//
// One poll loop, in the foreground: a signalfd (TERM and INT drain, HUP reloads, CHLD
// reaps), the runs' pipes, inotify on the file's directory (editors replace files by
// rename; a changed file reloads), and a timeout to the next slot's start, with no wake-up
// between and no server command (an idle daemon costs nothing). A file that does not read
// keeps the schedule read before. Draining stops starting slots, lets the runs finish for
// a grace, then stops them (their slots recorded interrupted). A child subreaper (or PID 1
// in a container), it reaps every orphan. sd_notify: READY, STATUS, WATCHDOG, STOPPING.

#include <chrono>
#include <string>

#include "config/config.hpp"
#include "cron/crontab.hpp"
#include "job/cron_slot.hpp"

namespace redlock::cron {

struct DaemonOptions {
    std::string file;
    bool json = false;                      // --json: one JSON object per line on stdout
    std::chrono::milliseconds grace{20000}; // --grace: how long a drain lets runs finish
    int verbosity = 1;                      // 0 -q, 1, 2 -v
};

// Runs until drained (0), or returns 78 when the file cannot be read at the start.
[[nodiscard]] int run_daemon(const DaemonOptions& options, const config::Config& config);

// When the run of a job's slot starts: `jitter`'s share of the slot, the same on every host
// (a hash of the job's identity and the slot's instant): [0, jitter).
[[nodiscard]] std::chrono::milliseconds jitter_delay(const std::string& identity, Instant slot,
                                                     std::chrono::milliseconds jitter);

// The catch-up window of a job: its catch-up= (default k_default_catch_up), and at least
// k_on_time (a host whose clock or timer lags); from the slot's start (its jitter).
inline constexpr std::chrono::milliseconds k_default_catch_up{std::chrono::hours(1)};
inline constexpr std::chrono::milliseconds k_on_time{std::chrono::minutes(1)};
[[nodiscard]] std::chrono::milliseconds catch_up_window(const Settings& settings);

// How many runs of a job may run at once fleet-wide: limit=, or with overlap=allow and no
// limit, k_allow_limit.
inline constexpr size_t k_allow_limit = 10;
[[nodiscard]] size_t runs_at_once(const Settings& settings);

// The job's latest fires at or before `at`, oldest first, at most `count`.
[[nodiscard]] std::vector<Instant> fires_before(const Job& job, Instant at, size_t count);

} // namespace redlock::cron
