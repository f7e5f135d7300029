#pragma once
// The releaser: what is done for a run whose redlock died (SIGKILL, the OOM killer, a
// crash), by the process its watchdog becomes once PROGRAM's tree is gone (`redlock
// __release-dead-run`, the will on its stdin: process/watchdog.hpp, job/will.hpp). It does
// what the run would have done, through the paths lock/ has for it:
//   - killed while acquiring: the token of the attempt in flight is released wherever it
//     landed (compare-and-delete), and the place in line given up; no history entry (the
//     run decided nothing, as one interrupted while waiting);
//   - killed while holding, PROGRAM's tree proven gone: the lock is released with the
//     history entry `killed` (with --min-hold, kept for what is left of it), waking the
//     waiters as any release does; the --once-per slot's record gets its end;
//   - killed during its release: the same, with the outcome redlock had recorded;
//   - PROGRAM's tree not proven gone: nothing is released (the lock keeps its TTL), and
//     the history entry `killed` has a note saying why.
// What it releases is only what its will names: a will forged by hand can do no more
// than `release --token`.

#include <optional>
#include <string>

#include "job/events.hpp"
#include "job/run.hpp"
#include "job/will.hpp"

namespace redlock::job {

struct DeadRun {
    RunResult result;                // the run's outcome: killed, or what redlock recorded
    std::optional<std::string> note; // why the lock keeps its TTL
};

[[nodiscard]] DeadRun release_dead_run(const WillContents& will, Observer& observer);

} // namespace redlock::job
