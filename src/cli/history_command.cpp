// `redlock history NAME`: the runs of a lock name, newest first, read from the servers
// (lock/history.hpp), as a table (with a timeline on a terminal) or one JSON document.

#include <algorithm>
#include <chrono>
#include <unistd.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cron/fire.hpp"
#include "lock/history.hpp"
#include "lock/keys.hpp"
#include "lock/quorum.hpp"
#include "redis/fanout.hpp"
#include "util/format.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/text.hpp"
#include "util/timestamp.hpp"

namespace redlock::cli {

namespace {

using Millis = std::chrono::milliseconds;
namespace log = util::log;

// A time from the servers, or "-" when unknown (lock::HistoryEntry).
std::string iso(std::optional<long long> ms) {
    return ms ? util::format_utc_timestamp(util::UtcMillis(Millis(*ms))) : "-";
}

// A duration from the servers, "-" when unknown.
std::string duration_text(std::optional<long long> ms) {
    return ms ? human_duration(Millis(*ms)) : "-";
}

// "by root@host (pid 42)" for a skip or a force release, when known.
std::string by_text(const lock::HistoryEntry& e) {
    if (!e.by_host && !e.by_pid)
        return {};
    return util::format("{}@{} (pid {})", e.by_user.value_or("?"), e.by_host.value_or("?"),
                        e.by_pid.value_or(0));
}

// A cron slot's instant, as REDLOCK_SLOT gave it ("-" when not one).
std::string slot_text(std::optional<long long> slot_ms) {
    if (!slot_ms)
        return "-";
    return cron::slot_text(
        cron::Instant(std::chrono::floor<std::chrono::seconds>(Millis(*slot_ms))));
}

// The outcome in words for the table: "ran", "skipped: held by root@h (pid 4)", ...
std::string outcome_text(const lock::HistoryEntry& e) {
    const auto by = by_text(e);
    if (e.outcome == "skipped-held")
        return by.empty() ? "skipped: held" : "skipped: held by " + by;
    if (e.outcome == "skipped-slot")
        return by.empty() ? "skipped: slot already run" : "skipped: slot already run by " + by;
    if (e.outcome == "gave-up")
        return e.waited_ms ? util::format("gave up after {}", human_duration(Millis(*e.waited_ms)))
                           : "gave up";
    if (e.outcome == "force-released")
        return by.empty() ? "force-released" : "force-released by " + by;
    if (e.outcome == "force-release")
        return by.empty() ? "released by force" : "released by force from " + by;
    if (e.outcome == "lost")
        return "lease lost";
    if (e.outcome == "max-hold")
        return "stopped by --max-hold";
    if (e.outcome == "killed")
        return e.note ? "redlock killed; the lock kept its ttl" : "redlock killed; released";
    if (e.outcome == "reaped")
        return by.empty() ? "reaped (an earlier boot)" : "reaped by " + by + " (an earlier boot)";
    if (e.outcome == "ran" && e.exit_status)
        return util::format("ran, exit {}", *e.exit_status);
    if (e.outcome == "skipped-overlap")
        return "skipped: an earlier slot's run still ran";
    if (e.outcome == "missed")
        return "missed: no host ran it in time";
    if (e.outcome == "interrupted" && e.slot_ms)
        return "interrupted: its daemon stopped";
    return e.outcome;
}

bool held(const lock::HistoryEntry& e) {
    return e.held_ms.value_or(0) > 0 || e.fence.has_value();
}

// One line per run: a bar over the window the runs shown span, '.' waiting, '#' holding,
// '|' a run that did not hold (skipped, gave up) at its end; blank when its start is unknown.
std::string timeline(const lock::HistoryEntry& e, long long from, long long to, size_t width) {
    std::string bar(width, ' ');
    if (!e.started_ms)
        return "[" + bar + "]";
    const double span = static_cast<double>(std::max<long long>(to - from, 1));
    auto column = [&](long long ms) {
        auto c = static_cast<long long>(static_cast<double>(ms - from) / span *
                                        static_cast<double>(width - 1));
        return static_cast<size_t>(std::clamp<long long>(c, 0, static_cast<long long>(width) - 1));
    };
    const long long acquired = *e.started_ms + e.waited_ms.value_or(0);
    const long long end = acquired + e.held_ms.value_or(0);
    for (size_t c = column(*e.started_ms); c < column(acquired); ++c)
        bar[c] = '.';
    if (held(e)) {
        for (size_t c = column(acquired); c <= column(end); ++c)
            bar[c] = '#';
    } else {
        bar[column(end)] = '|';
    }
    return "[" + bar + "]";
}

std::string table(const std::vector<lock::HistoryEntry>& runs, bool bars) {
    long long from = 0;
    long long to = 0;
    for (const auto& e : runs) {
        if (!e.started_ms)
            continue;
        const long long end = *e.started_ms + e.waited_ms.value_or(0) + e.held_ms.value_or(0);
        from = from == 0 ? *e.started_ms : std::min(from, *e.started_ms);
        to = std::max(to, end);
    }
    // A cron job's entries name their slot: a column of its own.
    const bool slots =
        std::ranges::any_of(runs, [](const auto& e) { return e.slot_ms.has_value(); });
    auto slot_column = [&](const lock::HistoryEntry* e) -> std::string {
        if (!slots)
            return {};
        return util::format("{:<20}  ", e == nullptr ? "SLOT (UTC)" : slot_text(e->slot_ms));
    };
    std::string out = util::format("{}{}{:<24}  {:<16} {:>7}  {:<10} {:>7} {:>7} {:>6}  {}\n",
                                   bars ? util::format("{:<26}  ", "TIMELINE") : std::string(),
                                   slot_column(nullptr), "STARTED (UTC)", "HOST", "PID", "USER",
                                   "WAITED", "HELD", "FENCE", "OUTCOME / COMMAND");
    for (const auto& e : runs) {
        out += util::format(
            "{}{}{:<24}  {:<16} {:>7}  {:<10} {:>7} {:>7} {:>6}  {}: {}\n",
            bars ? timeline(e, from, to, 24) + "  " : std::string(), slot_column(&e),
            iso(e.started_ms), util::clip(util::printable(e.host), 16), e.pid,
            util::clip(util::printable(e.user), 10),
            e.waited_ms != 0 ? duration_text(e.waited_ms) : "-",
            held(e) ? duration_text(e.held_ms) : "-", e.fence ? std::to_string(*e.fence) : "-",
            util::printable(outcome_text(e)), util::printable(e.command));
    }
    return out;
}

} // namespace

void write_history_run(util::JsonWriter& json, const lock::HistoryEntry& e) {
    json.begin_object()
        .field("run", e.run)
        .field("started_at", e.started_ms ? std::optional(iso(e.started_ms)) : std::nullopt)
        .field("host", e.host)
        .field("pid", e.pid)
        .field("user", e.user)
        .field("command", e.command)
        .field("outcome", e.outcome)
        .field("exit_status", e.exit_status)
        .field("waited_ms", e.waited_ms)
        .field("held_ms", held(e) ? e.held_ms : std::nullopt)
        .field("fence", e.fence);
    json.key("by");
    if (e.by_host || e.by_pid)
        json.begin_object()
            .field("host", e.by_host)
            .field("pid", e.by_pid)
            .field("user", e.by_user)
            .end_object();
    else
        json.null();
    if (e.note) // only a killed run's whose lock kept its ttl: why
        json.field("note", *e.note);
    if (e.slot_ms) // a cron slot's
        json.field("slot", slot_text(e.slot_ms));
    json.end_object();
}

std::string history_last_text(const lock::HistoryEntry& e) {
    return util::printable(util::format(
        "{}, {}@{} (pid {}) at {}{}", outcome_text(e), e.user, e.host, e.pid, iso(e.started_ms),
        held(e) ? ", held " + duration_text(e.held_ms) : std::string()));
}

int history_command(const HistoryOptions& options, const config::Config& config) {
    auto conns = redis::connect_all(config.servers);
    const lock::Keys keys(config.key_prefix, options.name);
    auto read = lock::read_history(conns, keys, options.count);
    // Entries are written where the lock was, so a reading needs a majority: fewer could
    // miss runs that only the others have.
    if (read.answered < lock::majority_of(conns.size())) {
        std::string why;
        for (const auto& f : read.failures)
            why += (why.empty() ? "" : "; ") + f;
        return report({read.auth_error ? util::ErrorKind::auth : util::ErrorKind::unavailable,
                       util::format("cannot read the history of '{}': {} of {} servers "
                                    "answered, {} needed ({})",
                                    options.name, read.answered, conns.size(),
                                    lock::majority_of(conns.size()), why)});
    }
    for (const auto& f : read.failures)
        log::note("history of '{}' not read on {}", options.name, f);
    if (read.skipped > 0)
        log::note("history of '{}': {} {} passed over (not a run's, or larger than {} KB: "
                  "written by another client)",
                  options.name, read.skipped, read.skipped == 1 ? "entry" : "entries",
                  lock::k_max_history_entry >> 10);
    if (options.since) {
        const auto now = std::chrono::floor<Millis>(std::chrono::system_clock::now());
        const long long from = now.time_since_epoch().count() - options.since->count();
        // (A run whose start is unknown is not known to be recent.)
        std::erase_if(read.runs, [&](const lock::HistoryEntry& e) {
            return !e.started_ms || *e.started_ms < from;
        });
    }
    std::string out;
    if (options.json) {
        util::JsonWriter json;
        json.begin_object().field("name", options.name).key("runs").begin_array();
        for (const auto& e : read.runs)
            write_history_run(json, e);
        json.end_array().field("skipped", read.skipped).end_object();
        out = json.str();
    } else if (read.runs.empty()) {
        out = util::format("{}: no runs recorded{}\n", options.name,
                           config.history == 0 ? " (history = 0 in the config)" : "");
    } else {
        out = table(read.runs, ::isatty(STDOUT_FILENO) == 1);
    }
    if (!print_stdout(out))
        return util::exit_code::internal;
    return 0;
}

} // namespace redlock::cli
