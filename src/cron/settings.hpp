#pragma once
// A job's own settings, written in a comment right before its line, which a plain crond
// reads as a comment:
//   # redlock: name=backup catch-up=6h overlap=queue timeout=2h jitter=30s limit=2
//   # redlock: at-least-once dir=/srv/app
//   30 2 * * *  /usr/local/bin/backup
// Several such lines may precede one job; each key once. A value with blanks is quoted
// ("dir=\"/srv/my app\"", no escapes).

#include <chrono>
#include <expected>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "cron/schedule.hpp"

namespace redlock::cron {

// What the fleet does when a slot comes while the job's previous run still runs anywhere.
enum class Overlap {
    skip,    // the new slot is not run (recorded as skipped)
    allow,   // both run
    queue,   // one slot waits for the run to end; more are skipped
    replace, // the running one is stopped, as `release --force` does, and the new one runs
};

[[nodiscard]] std::string_view overlap_name(Overlap overlap);

struct Settings {
    std::optional<std::string> name;                   // the identity, in place of a derived one
    std::optional<std::chrono::milliseconds> catch_up; // unset: the daemon's default
    Overlap overlap = Overlap::skip;
    std::optional<std::chrono::milliseconds> timeout; // as --max-hold: status 124
    std::chrono::milliseconds jitter{0};
    size_t limit = 1;               // as --limit
    bool at_least_once = false;     // a slot whose holder died is run again elsewhere
    std::optional<std::string> dir; // the working directory, an absolute path
    bool operator==(const Settings&) const = default;
};

// Whether `line` (no leading blanks) is a settings comment: "#", blanks, "redlock:".
[[nodiscard]] bool is_settings_line(std::string_view line);

// Reads the settings of one comment line (no leading blanks) into `settings`; `seen` holds
// the keys that earlier lines for the same job set. Errors point into `line`.
[[nodiscard]] std::expected<void, LineError>
read_settings(std::string_view line, Settings& settings, std::set<std::string>& seen);

} // namespace redlock::cron
