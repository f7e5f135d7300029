#pragma once
// Pieces shared by the commands: the one place where an error or a job's outcome becomes
// an exit status (and its message), command output on stdout, and durations for people.

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "job/acquire.hpp"
#include "job/run.hpp"
#include "lock/history.hpp"
#include "lock/holder.hpp"
#include "lock/lock.hpp"
#include "util/duration.hpp"
#include "util/error.hpp"
#include "util/json.hpp"

namespace redlock::cli {

// Prints "redlock: message" and returns the error kind's exit status.
int report(const util::Error& error);

// The names of the locks matching `pattern` (lock::list_names). Each server that could not
// be scanned is said once: as the error returned when none could (then nothing is listed),
// otherwise on stderr next to what the others listed.
[[nodiscard]] util::Expected<std::vector<std::string>>
list_or_say(std::span<redis::Connection> conns, std::string_view prefix, std::string_view pattern);

// -v shows every release; a release that did not reach a server is worth a note without
// -v: the next holder there must wait for the TTL. Servers left behind once a majority
// answered are not: their release was sent, or is being finished in the background.
void note_release(std::string_view name, const std::vector<lock::ServerResult>& results);

// The exit status when acquisition did not end with the lock: the error's, 128+N for an
// interrupting signal, or `conflict_exit_code`. nullopt when the lock was acquired.
[[nodiscard]] std::optional<int>
unless_acquired(const util::Expected<job::Acquisition>& acquisition, int conflict_exit_code);

// The exit status of a run (the contract's table): PROGRAM's own, 79 lost, 124 max-hold,
// `conflict_exit_code` when not acquired, 128+N interrupted, or the error's (said here).
[[nodiscard]] int exit_status(const job::RunResult& result, int conflict_exit_code);

// Writes command output to stdout (which belongs to the commands' output, not to messages).
// Returns false, after saying why on stderr, when it could not be written: a full disk, a
// closed pipe, or a stdout that was closed when redlock started (EBADF, although it is
// /dev/null by now). The caller then exits 70.
[[nodiscard]] bool print_stdout(const std::string& text);

// "24.3s", "5m 3s", "2h 10m", "1d 2h": a duration for people (lock/reap.cpp says them too).
using util::human_duration;

// How long ago an ISO 8601 UTC timestamp ("2026-12-02T14:16:33.620Z") was; nullopt when
// the text is not one, or is before 1970 (metadata is whatever a client wrote).
[[nodiscard]] std::optional<std::chrono::milliseconds> age_of(const std::string& iso);

// A history entry (cli/history_command.cpp) as `status` shows it: one line for a person,
// or a JSON object as `history --json` writes each run.
[[nodiscard]] std::string history_last_text(const lock::HistoryEntry& entry);
void write_history_run(util::JsonWriter& json, const lock::HistoryEntry& entry);

// "user@host (pid N)", escaped for a terminal, or "an unknown owner (...)".
[[nodiscard]] std::string holder_text(const std::optional<lock::Holder>& holder);

} // namespace redlock::cli
