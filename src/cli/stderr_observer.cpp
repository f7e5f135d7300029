#include "cli/stderr_observer.hpp"

#include "cli/common.hpp"
#include "util/duration.hpp"
#include "util/format.hpp"
#include "util/log.hpp"
#include "util/timestamp.hpp"

namespace redlock::cli {

namespace log = util::log;
using Millis = std::chrono::milliseconds;

void StderrObserver::notice(std::string_view text) {
    log::note("{}", text);
}

void StderrObserver::wait_started(std::string_view name, std::string_view held_by,
                                  const std::vector<lock::ServerResult>& round) {
    if (log::verbose_enabled()) // see log::verbose
        log::verbose("lock '{}' is {}; waiting ({})", name, held_by, lock::describe_round(round));
}

bool StderrObserver::wants_holder() const {
    return log::level() != log::Level::quiet;
}

void StderrObserver::waiting(const job::Waiting& state) {
    if (!m_progress)
        m_progress.emplace(std::string(state.name), state.started, state.give_up);
    if (wants_holder()) {
        if (state.holder_read)
            m_progress->set_holder(state.holder, state.other_holders);
        else
            m_progress->holder_unknown();
    }
    if (state.queue_position)
        m_progress->set_queue_position(state.queue_position);
}

job::Clock::time_point StderrObserver::tick(job::Clock::time_point now) {
    return m_progress ? m_progress->update(now) : job::Clock::time_point::max();
}

void StderrObserver::acquired(const job::Acquired& what) {
    if (!log::verbose_enabled()) // see log::verbose
        return;
    log::verbose(
        "acquired '{}'{} in {} after {} attempt{}, fence {}{} ({})", what.name,
        what.limit > 1 ? util::format(" (permit {} of {})", what.permit, what.limit)
                       : std::string(),
        util::format("{:.1f}ms", std::chrono::duration<double, std::milli>(what.waited).count()),
        what.attempts, what.attempts == 1 ? "" : "s", what.fence,
        what.servers.size() == 1
            ? std::string()
            : util::format(" sent to {} of {} servers", what.fence_copies, what.servers.size()),
        lock::describe_round(what.servers));
}

void StderrObserver::not_acquired(const job::NotAcquired& what) {
    using Why = job::NotAcquired::Why;
    switch (what.why) {
    case Why::min_validity:
        log::note("lock '{}' was not acquired with at least {} of validity left", what.name,
                  util::format_duration(what.min_validity.value_or(Millis(0))));
        return;
    case Why::held:
        log::note("lock '{}' is {}", what.name, what.held_by);
        return;
    case Why::wait_ran_out:
        log::note("lock '{}' is still {} after {}", what.name, what.held_by,
                  util::format_duration(what.wait.value_or(Millis(0))));
        return;
    }
}

void StderrObserver::slot_taken(std::string_view name, job::Millis slot,
                                const std::optional<lock::LastRun>& last) {
    std::string who;
    if (last)
        who = util::format(": {} started it at {}", holder_text(last->who),
                           util::format_utc_timestamp(util::UtcMillis(Millis(last->started_ms))));
    log::note("'{}' has already run in this {} slot{}", name, util::format_duration(slot), who);
}

void StderrObserver::renewed(const std::vector<lock::ServerResult>& round) {
    if (log::verbose_enabled()) // see log::verbose
        log::verbose("renewed '{}': {}", m_name, lock::describe_round(round));
}

void StderrObserver::renewal_failed(const std::vector<lock::ServerResult>& round, bool first) {
    if (first)
        log::note("renewing '{}' failed, retrying: {}", m_name, lock::describe_round(round));
    else if (log::verbose_enabled())
        log::verbose("renewing '{}' failed again: {}", m_name, lock::describe_round(round));
}

void StderrObserver::renewal_recovered() {
    log::note("renewing '{}' works again", m_name);
}

void StderrObserver::stopping(job::StopReason reason, std::string_view why) {
    switch (reason) {
    case job::StopReason::lease_lost:
    case job::StopReason::force_released: {
        // Said before PROGRAM's own reaction to TERM can reach the terminal, but only if
        // stderr takes it at once: a full pipe or a terminal stopped by ^S must not delay
        // the TERM (then it is said after, in catch_up).
        auto message = util::format("lost the lock '{}': {}; stopping PROGRAM", m_name, why);
        if (!log::write_if_ready(message))
            m_unsaid = std::move(message);
        return;
    }
    case job::StopReason::max_hold:
        log::error("'{}': {}; stopping it", m_name, why);
        return;
    case job::StopReason::watchdog_gone:
        log::error("'{}': {}, so stopping PROGRAM", m_name, why);
        return;
    case job::StopReason::leftovers:
        log::verbose("{}; stopping them", why);
        return;
    case job::StopReason::internal:
        log::error("{}; stopping PROGRAM", why);
        return;
    }
}

void StderrObserver::catch_up() {
    if (!m_unsaid.empty())
        log::write(m_unsaid);
    m_unsaid.clear();
}

// -v shows every release; a release that did not reach a server is worth a note without
// -v: the next holder there must wait for the TTL. Servers left behind once a majority
// answered are not: their release was sent, or is being finished in the background.
void StderrObserver::released(const std::vector<lock::ServerResult>& round) {
    note_release(m_name, round);
}

void StderrObserver::kept(job::Millis left, job::Millis min_hold) {
    log::verbose("'{}' stays held for {} more (--min-hold {})", m_name, util::format_duration(left),
                 util::format_duration(min_hold));
}

} // namespace redlock::cli
