#include "cli/common.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <poll.h>
#include <set>
#include <unistd.h>

#include "cli/progress.hpp"
#include "lock/inspect.hpp"
#include "lock/name.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"
#include "util/fd.hpp"
#include "util/format.hpp"
#include "util/log.hpp"
#include "util/random.hpp"
#include "util/text.hpp"
#include "util/timestamp.hpp"

namespace redlock::cli {

namespace {

using Millis = std::chrono::milliseconds;
namespace log = util::log;

} // namespace

void note_release(std::string_view name, const std::vector<lock::ServerResult>& results) {
    if (log::verbose_enabled()) // see log::verbose
        log::verbose("released '{}': {}", name, lock::describe_round(results));
    std::string missed;
    for (const auto& r : results)
        if (r.vote == lock::ServerResult::Vote::failed && !r.abandoned && !r.ran_anyway)
            missed += (missed.empty() ? "" : ", ") + r.server + " (" + r.detail + ")";
    if (!missed.empty() && !log::verbose_enabled())
        log::note("could not release '{}' on {}; it expires there by its ttl", name, missed);
}

int report(const util::Error& error) {
    log::error("{}", error.message);
    return util::exit_status(error.kind);
}

util::Expected<std::vector<std::string>>
list_or_say(std::span<redis::Connection> conns, std::string_view prefix, std::string_view pattern) {
    auto found = lock::list_names(conns, prefix, pattern);
    if (found.scanned == 0 && !found.failures.empty())
        return std::unexpected(lock::unreadable_error(found.failures));
    for (const auto& f : found.failures)
        log::error("cannot list locks on {}: {}", f.server, f.error);
    return std::move(found.names);
}

std::optional<int> unless_acquired(const util::Expected<job::Acquisition>& acquisition,
                                   int conflict_exit_code) {
    if (!acquisition)
        return report(acquisition.error());
    switch (acquisition->outcome) {
    case job::Acquisition::Outcome::acquired:
        return std::nullopt;
    case job::Acquisition::Outcome::interrupted:
        return 128 + acquisition->signal;
    case job::Acquisition::Outcome::held:
    case job::Acquisition::Outcome::gave_up:
        break;
    }
    return conflict_exit_code;
}

int exit_status(const job::RunResult& result, int conflict_exit_code) {
    switch (result.outcome) {
    case job::Outcome::ran:
        return result.program_status;
    case job::Outcome::lost:
    case job::Outcome::force_released:
        return util::exit_code::lease_lost;
    case job::Outcome::max_hold:
        return util::exit_code::max_hold;
    case job::Outcome::stopped:
        return util::exit_code::internal;
    case job::Outcome::skipped_held:
    case job::Outcome::skipped_slot:
    case job::Outcome::skipped_overlap:
    case job::Outcome::missed:
    case job::Outcome::gave_up:
        return conflict_exit_code;
    case job::Outcome::interrupted:
        return 128 + result.signal;
    case job::Outcome::killed: // as its parent saw it, whatever the signal (not known)
        return 128 + SIGKILL;
    case job::Outcome::failed:
        break;
    }
    return report(result.error.value_or(util::Error{util::ErrorKind::internal, "run failed"}));
}

bool print_stdout(const std::string& text) {
    // A full disk or a closed pipe must not pass silently for a script reading our output.
    int error = 0;
    if (util::was_closed_at_start(STDOUT_FILENO))
        error = EBADF;
    else if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() ||
             std::fflush(stdout) != 0)
        error = errno; // read at once: the next library call may change it
    if (error == 0)
        return true;
    log::error("write error on standard output: {}", std::strerror(error));
    return false;
}

// Computed in milliseconds: system_clock's nanoseconds would overflow for a year like 9999.
std::optional<Millis> age_of(const std::string& iso) {
    auto then = util::parse_utc_timestamp(iso);
    if (!then || !util::plausible_ms(then->time_since_epoch().count()))
        return std::nullopt;
    return std::chrono::floor<Millis>(std::chrono::system_clock::now()) - *then;
}

std::string holder_text(const std::optional<lock::Holder>& holder) {
    if (!holder)
        return "an unknown owner (no redlock metadata)";
    return util::printable(util::format("{}@{} (pid {})", holder->user, holder->host, holder->pid));
}

} // namespace redlock::cli
