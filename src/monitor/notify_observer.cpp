#include "monitor/notify_observer.hpp"

#include "util/duration.hpp"
#include "util/format.hpp"
#include "util/log.hpp"
#include "util/text.hpp"
#include "util/timestamp.hpp"

namespace redlock::monitor {

namespace {

using namespace std::chrono_literals;

// "3h12m", "5m3s", "12s": short, for a status line.
std::string compact(std::chrono::milliseconds d) {
    long long s = std::max<long long>(0, d.count() / 1000);
    if (s < 60)
        return util::format("{}s", s);
    if (s < 3600)
        return util::format("{}m{}s", s / 60, s % 60);
    if (s < 86400)
        return util::format("{}h{}m", s / 3600, (s % 3600) / 60);
    return util::format("{}d{}h", s / 86400, (s % 86400) / 3600);
}

// One line of a STATUS= value: a newline would start another assignment.
std::string one_line(std::string_view text) {
    std::string out = util::printable(text);
    for (char& c : out)
        if (c == '\n' || c == '\r')
            c = ' ';
    return out;
}

} // namespace

NotifyObserver::NotifyObserver(std::string name, NotifySocket socket,
                               std::optional<std::chrono::microseconds> watchdog, bool passthrough)
    : m_name(std::move(name)), m_socket(std::move(socket)), m_passthrough(passthrough) {
    if (watchdog)
        m_ping_every = std::max<job::Clock::duration>(*watchdog / 3, 1ms);
}

void NotifyObserver::send(const std::string& message) {
    std::string error;
    if (m_socket.send(message, error) || m_failed)
        return;
    m_failed = true;
    util::log::verbose("{}; systemd is not told how the run goes", error);
}

std::string NotifyObserver::waiting_status(job::Clock::time_point /*now*/) const {
    std::string text = util::format("waiting for '{}'", m_name);
    if (!m_waiting)
        return text;
    if (!m_waiting->held_by.empty())
        text += ", " + m_waiting->held_by;
    if (m_waiting->since) {
        auto age = std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now()) -
                   *m_waiting->since;
        text += " for " + compact(age);
    }
    if (m_waiting->queue_position)
        text += util::format(" ({} ahead in line)", *m_waiting->queue_position);
    return text;
}

void NotifyObserver::wait_started(std::string_view /*name*/, std::string_view held_by,
                                  const std::vector<lock::ServerResult>& /*round*/) {
    m_waiting.emplace(WaitState{util::format("{}", held_by), std::nullopt, std::nullopt});
    send("STATUS=" + one_line(waiting_status(job::Clock::now())));
}

void NotifyObserver::waiting(const job::Waiting& state) {
    if (!m_waiting)
        m_waiting.emplace();
    if (state.holder_read && state.holder) {
        const auto& h = *state.holder;
        m_waiting->held_by = util::format("held by {} (pid {})", h.host, h.pid);
        m_waiting->since = util::parse_utc_timestamp(h.acquired_at);
    } else if (state.holder_read) {
        m_waiting->held_by = "held by another owner";
        m_waiting->since.reset();
    }
    m_waiting->queue_position = state.queue_position;
    send("STATUS=" + one_line(waiting_status(job::Clock::now())));
    m_next_status = job::Clock::now() + 1min;
}

job::Clock::time_point NotifyObserver::tick(job::Clock::time_point now) {
    auto next = job::Clock::time_point::max();
    if (m_waiting) {
        // The holder's time grows: the status says it again once a minute.
        if (now >= m_next_status) {
            send("STATUS=" + one_line(waiting_status(now)));
            m_next_status = now + 1min;
        }
        next = m_next_status;
    }
    if (m_running && m_ping_every) {
        if (now >= m_next_ping) {
            send("WATCHDOG=1");
            m_next_ping = now + *m_ping_every;
        }
        next = std::min(next, m_next_ping);
    }
    return next;
}

void NotifyObserver::acquired(const job::Acquired& what) {
    m_fence = what.fence;
    m_waiting.reset();
}

void NotifyObserver::not_acquired(const job::NotAcquired& what) {
    using Why = job::NotAcquired::Why;
    m_waiting.reset();
    send("STATUS=" + one_line(what.why == Why::held
                                  ? util::format("not run: '{}' is {}", m_name, what.held_by)
                                  : util::format("not run: '{}' is still {} after the wait", m_name,
                                                 what.held_by)));
}

void NotifyObserver::slot_taken(std::string_view name, job::Millis slot,
                                const std::optional<lock::LastRun>& /*last*/) {
    send("STATUS=" + one_line(util::format("not run: '{}' has already run in this {} slot", name,
                                           util::format_duration(slot))));
}

void NotifyObserver::program_started(long pid) {
    m_running = true;
    std::string message = m_passthrough ? "" : "READY=1\n";
    message += "STATUS=" + one_line(util::format("running PROGRAM (pid {}) under '{}', fence {}",
                                                 pid, m_name, m_fence));
    if (m_ping_every) {
        message += "\nWATCHDOG=1";
        m_next_ping = job::Clock::now() + *m_ping_every;
    }
    send(message);
}

void NotifyObserver::stopping(job::StopReason reason, std::string_view why) {
    // A lost lease ends the pings at once: systemd must not hear that all is well from a
    // redlock whose PROGRAM runs without the lock.
    m_running = false;
    if (reason == job::StopReason::leftovers) // PROGRAM has exited already: said there
        return;
    std::string message = m_stopping ? "" : "STOPPING=1\n";
    m_stopping = true;
    const char* what = reason == job::StopReason::lease_lost ? "lost the lock" : "stopping";
    send(message +
         "STATUS=" + one_line(util::format("{} '{}': {}; stopping PROGRAM", what, m_name, why)));
}

void NotifyObserver::program_exited(int /*wait_status*/) {
    m_running = false;
    if (m_stopping)
        return;
    m_stopping = true;
    send("STOPPING=1\nSTATUS=" +
         one_line(util::format("PROGRAM has ended; releasing '{}'", m_name)));
}

void NotifyObserver::finish(const job::RunResult& result, int exit_status) {
    send("STATUS=" + one_line(util::format("done: '{}' {}, exit status {}", m_name,
                                           job::outcome_name(result.outcome), exit_status)));
}

} // namespace redlock::monitor
