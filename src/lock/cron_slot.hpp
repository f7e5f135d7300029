#pragma once
// A `redlock cron` slot on the servers (lock/cron_scripts.hpp): the job's lock is taken
// first (mutual exclusion over a majority), then its slot record is advanced to the slot
// by the holder, as --once-per's is. A run that finds the lock held looks at the record
// and at what the holder runs for, and is told what to do: the slot is decided already,
// an at-least-once slot's run may still die, a holder is about to claim, or an earlier
// slot's run overlaps it (skipped or queued here when asked). Each decision counts by the
// majority rule; a server's clock that has not reached the slot's instant says by how
// much, and nothing is decided before it has.

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lock/history.hpp"
#include "lock/lock.hpp"

namespace redlock::lock {

// What every script of a slot is told.
struct CronSlotArgs {
    long long slot_ms = 0;        // the slot's instant, ms since the Unix epoch
    long long claim_until_ms = 0; // a fresh claim after this is too late: recorded missed
    bool at_least_once = false;
    long long keep_until_ms = 0; // the record's expiry, at the earliest
    long long next_ms = 0;       // the job's next fire after the slot (0: none)
    // At least once: until when a dead run's earlier slot goes first (its waiting runs
    // claim it again) before this one is claimed.
    long long defer_until_ms = 0;
    std::string schedule; // the job's schedule and zone, for the exporter
    std::string zone;
    std::string host; // the run's host, for the record (who ran the slot)
    // The tokens of this run's earlier claims whose answers did not reach it (a majority
    // may have them): such a claim is this run's own, which has not started PROGRAM.
    std::vector<std::string> unsure_tokens;
};

struct CronClaim {
    enum class Verdict {
        claimed,  // the slot is ours to run (again, with `again`)
        early,    // a majority's clocks are `early` short of the instant
        done,     // decided already (claimed by `by_host`, or recorded missed or skipped)
        missed,   // too late: recorded missed here
        deferred, // an earlier slot whose run died is to run again first: try again shortly
        failed,   // no majority either way (too few servers answered, or votes split)
    } verdict = Verdict::failed;
    bool again = false;
    Millis early{0};
    // claimed, missed: the slot decided before this one, and the latest skipped, as the
    // servers that voted for it had them (the largest).
    std::optional<long long> last_ms;
    std::optional<long long> skipped_ms;
    std::string by_host;
    // The servers' clock when they answered (the median of those that did), Unix ms.
    std::optional<long long> server_ms;
};

// The claim of `args.slot_ms` by the holder of `lock`.
[[nodiscard]] CronClaim claim_cron_slot(Lock& lock, const CronSlotArgs& args);

enum class CronOverlap { look, skip, queue };

struct CronLook {
    enum class Verdict {
        retry,   // free now, or a holder is about to claim: try again shortly
        early,   // as CronClaim
        done,    // as CronClaim
        running, // at-least-once: its run may die; wait for the release
        overlap, // an earlier slot's run holds the lock (CronOverlap::look)
        skipped, // an overlap, recorded skipped by a majority
        queued,  // an overlap, queued by a majority: wait for the release
        failed,  // too few servers answered
    } verdict = Verdict::failed;
    Millis early{0};
    std::string by_host;
    std::optional<long long> server_ms; // as CronClaim's
};

// What a run of `args.slot_ms` that found the lock held does; with `overlap` skip or queue,
// an overlap is recorded as such where the servers find one.
[[nodiscard]] CronLook look_at_cron_slot(Lock& lock, const CronSlotArgs& args, CronOverlap overlap);

// Records how the claimed slot's run ended (`state`: done, lost, killed or unstarted;
// `status`: the exit status, or what could not be started), with `more` history entries
// in the same write; waits for a majority only.
void finish_cron_slot(Lock& lock, long long slot_ms, std::string_view state,
                      std::string_view status, std::span<const HistoryRecord> more = {});

// `records` (history entries) written in one pipeline to every server; waits for a
// majority only.
void record_slot_entries(Lock& lock, std::span<const HistoryRecord> records);

// History entries for a slot that no run made (missed, skipped-overlap): their run id is
// the same wherever they are written, for the slot and outcome, so that each is kept once.
[[nodiscard]] std::string slot_entry_id(std::string_view name, long long slot_ms,
                                        std::string_view outcome);

} // namespace redlock::lock
