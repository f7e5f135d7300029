#include "monitor/hook_observer.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "process/signals.hpp"
#include "util/duration.hpp"
#include "util/log.hpp"
#include "util/redact.hpp"

namespace redlock::monitor {

namespace log = util::log;

HookObserver::HookObserver(std::string name, std::string command, std::chrono::milliseconds timeout,
                           std::vector<std::string> secrets)
    : m_name(std::move(name)), m_command(std::move(command)), m_timeout(timeout),
      m_secrets(std::move(secrets)) {}

void HookObserver::acquired(const job::Acquired& what) {
    m_fence = what.fence;
    m_acquired = job::Clock::now();
}

void HookObserver::stopping(job::StopReason reason, std::string_view why) {
    // Said before PROGRAM is signalled: the hook starts after, in catch_up() (a lost lease)
    // or at the supervisor's next wake-up (tick), so that its start never delays the TERM.
    if (m_started || m_due_event)
        return;
    switch (reason) {
    case job::StopReason::lease_lost:
    case job::StopReason::force_released:
        m_due_event = reason == job::StopReason::force_released ? "force-released" : "lost";
        m_due_why = why;
        return;
    case job::StopReason::max_hold:
        m_due_event = "max-hold";
        m_due_why = why;
        return;
    case job::StopReason::watchdog_gone:
    case job::StopReason::leftovers:
    case job::StopReason::internal:
        return;
    }
}

void HookObserver::catch_up() {
    if (m_due_event && !m_started)
        start(*m_due_event, m_due_why);
    m_due_event.reset();
}

job::Clock::time_point HookObserver::tick(job::Clock::time_point /*now*/) {
    catch_up();
    return job::Clock::time_point::max();
}

void HookObserver::start(std::string_view event, std::string_view why) {
    m_started = true;
    const auto held =
        m_acquired
            ? std::chrono::duration_cast<std::chrono::milliseconds>(job::Clock::now() - *m_acquired)
            : std::chrono::milliseconds(0);
    auto hook = process::Hook::start(m_command,
                                     {{"REDLOCK_EVENT", std::string(event)},
                                      {"REDLOCK_KEY", m_name},
                                      {"REDLOCK_FENCE", std::to_string(m_fence)},
                                      {"REDLOCK_HELD_MS", std::to_string(held.count())},
                                      {"REDLOCK_REASON", util::redact_secrets(why, m_secrets)}},
                                     m_timeout);
    if (!hook) {
        log::note("cannot run the --on-lost command: {}", hook.error().message);
        return;
    }
    log::verbose("'{}': {}: --on-lost command started (pid {})", m_name, event, hook->pid());
    m_hook.emplace(std::move(*hook));
}

void HookObserver::finish() {
    catch_up();
    if (!m_hook)
        return;
    // A signal that would end redlock ends this wait too (the hook stays bounded by its
    // own deadline); a little past the deadline, for the runner's own kill and reap.
    auto signals = process::SignalEvents::open();
    const auto until = m_hook->deadline() + std::chrono::seconds(1);
    auto end = m_hook->wait(until, signals ? signals->fd() : -1);
    if (!end) {
        log::note("the --on-lost command (pid {}) is still running; it is left to end (or be "
                  "killed) {} after its start",
                  m_hook->pid(), util::format_duration(m_timeout));
        m_hook.reset();
        return;
    }
    m_hook.reset();
    switch (end->how) {
    case process::HookEnd::How::exited:
        if (end->code != 0)
            log::note("the --on-lost command exited with status {}", end->code);
        else
            log::verbose("the --on-lost command exited with status 0");
        return;
    case process::HookEnd::How::timed_out:
        log::note("the --on-lost command was still running after {} (hook_timeout); killed it",
                  util::format_duration(m_timeout));
        return;
    case process::HookEnd::How::not_run:
        log::note("cannot run the --on-lost command: {}", std::strerror(end->code));
        return;
    }
}

} // namespace redlock::monitor
