#pragma once
// What the cron daemon (cron/daemon.hpp) hands to the run it starts for one slot
// (`redlock __cron-slot`, cli/cron_command.cpp), on that run's stdin: the config as the
// daemon loaded it (servers, TLS, passwords: never argv or the environment), and the run
// itself. Read only by the same binary on the same machine (job/wire.hpp).

#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

#include "config/config.hpp"
#include "job/run.hpp"
#include "util/error.hpp"

namespace redlock::job {

struct SlotRun {
    config::Config config;
    RunSpec run;       // name, ttl, program ($SHELL -c COMMAND), max_hold, limit and the slot
    std::string dir;   // where PROGRAM runs (empty: the daemon's directory)
    pid_t daemon = 0;  // the daemon: the run dies with it (PR_SET_PDEATHSIG)
    int verbosity = 1; // 0 -q, 1, 2 -v: as the daemon's
};

[[nodiscard]] std::string encode_slot_run(const SlotRun& slot);
// An error (usage) when `bytes` is not one.
[[nodiscard]] util::Expected<SlotRun> decode_slot_run(std::string_view bytes);

// What the run of a slot tells its daemon, besides its output and its exit status: a line
// each on fd k_report_fd, "clock MS" once it knows how far the servers' clock is ahead of
// this host's (negative: behind), "started FENCE" once PROGRAM runs under the slot's claim,
// and at its end "ended OUTCOME STATUS FENCE HELD_MS MISSED BY" (STATUS -1 when PROGRAM
// did not run, FENCE 0 when the run held nothing, MISSED the slots it recorded missed, BY
// who ran the slot instead or "-").
inline constexpr int k_report_fd = 3;

struct SlotEnd {
    std::string outcome{}; // history's word
    int status = -1;
    long long fence = 0;
    long long held_ms = 0;
    size_t missed = 0;
    std::string by{};
};

[[nodiscard]] std::string started_line(long long fence);
[[nodiscard]] std::string ended_line(const SlotEnd& end);

struct ReportLine {
    std::optional<long long> clock;   // ms the servers' clock is ahead
    std::optional<long long> started; // the fence
    std::optional<SlotEnd> ended;
};
// nullopt for a line that is neither.
[[nodiscard]] std::optional<ReportLine> parse_report_line(std::string_view line);

// The word of the hidden command that runs one slot, its SlotRun on stdin: `redlock
// __cron-slot JOB SLOT` (the job and the slot are for `ps`; stdin says all).
inline constexpr const char* k_slot_command = "__cron-slot";

} // namespace redlock::job
