#pragma once
// One slot of a `redlock cron` job, as the run of that slot takes it: the daemon
// (cron/daemon.hpp) starts a run of the same binary per slot, and that run, a `run` in every
// other way (lease, watchdog, cgroup, will, history), takes the job's lock and claims the
// slot on the servers (lock/cron_slot.hpp) before PROGRAM starts. Whoever claims first
// runs it; the others learn that it is decided and go. Never before the slot's instant on
// the servers' clock: a run that is early sleeps until a majority of them reach it. A
// run that finds an earlier slot's run still holding the lock acts on the job's overlap
// policy: skip (recorded once), queue (one slot waits), replace (the running one is
// released by force), allow (with a limit: a permit each, skipped when none is free).

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "job/events.hpp"
#include "lock/history.hpp"
#include "lock/lock.hpp"
#include "process/signals.hpp"
#include "util/error.hpp"

namespace redlock::job {

enum class SlotOverlap { skip, allow, queue, replace };

struct CronSlot {
    long long instant_ms = 0; // the slot: REDLOCK_SLOT, ms since the Unix epoch
    // The schedule's fires before it, oldest first, at most k_previous_fires: those the
    // record shows undecided are recorded missed by the run that claims this one.
    std::vector<long long> previous_ms;
    long long next_ms = 0; // the fire after it (0: none), for the exporter
    std::string schedule;  // as written, and the job's zone: for the exporter
    std::string zone;
    SlotOverlap overlap = SlotOverlap::skip;
    bool at_least_once = false;
    // From the instant, how long a fresh claim may still be made (the job's catch-up window
    // and its jitter): later, the slot is recorded missed.
    Millis window{0};
    // How long the slot's record is kept at least, from the instant.
    Millis keep{0};
    // Where the run tells its daemon how far the servers' clock is from this host's, once
    // it knows (job/slot_run.hpp, "clock"); -1: nowhere.
    int report_fd = -1;

    static constexpr size_t k_previous_fires = 10;
};

// How taking the slot went.
struct SlotTaken {
    enum class How {
        claimed,         // ours to run: `lock` is held, the claim made (again: `again`)
        decided,         // run by another (`by_host` when known), or recorded otherwise
        skipped_overlap, // an earlier slot's run still runs: recorded skipped
        missed,          // too late to run it: recorded missed
        interrupted,     // a signal came first (`signal`)
        failed,          // `error`
    } how = How::failed;
    bool again = false;
    std::string by_host{};
    int signal = 0;
    std::optional<util::Error> error{};
    // Slots found undecided before this one (and this one, when missed), oldest first:
    // recorded missed (claimed: with the run's end; missed: at once).
    std::vector<long long> missed_ms{};
};

// Takes the lock of `name` (a single attempt each time, `quiet` told of them) and claims
// `slot` (lock/cron_slot.hpp), until it is ours or decided, or its window has passed.
// `host`: the run's, for the record (who ran the slot; the rest is in its history entry).
[[nodiscard]] SlotTaken take_slot(lock::Lock& lock, const std::string& name, const CronSlot& slot,
                                  const std::string& host, process::SignalEvents& signals);

// How long what a cron run writes keeps the name's record (lock::Lock::keep_record's
// `slot`, besides the history's age): past `keep_until_ms` (the slot's record's need: its
// catch-up window and next fire), as two "slots" of half what is left of it, and at least
// two --once-per slots of `once_per`.
[[nodiscard]] std::optional<Millis> record_slot(std::optional<Millis> once_per,
                                                std::optional<long long> keep_until_ms);

// The state a slot's record keeps for a run that ended so (lock/cron_scripts.hpp): an
// at-least-once slot whose run was lost, killed or interrupted is run again elsewhere;
// one that could not be started is open to any run.
[[nodiscard]] std::string_view slot_state(Outcome outcome);

} // namespace redlock::job
