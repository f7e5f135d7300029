#include "monitor/events_observer.hpp"

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/clock.hpp"
#include "util/format.hpp"
#include "util/log.hpp"
#include "util/redact.hpp"
#include "util/timestamp.hpp"

namespace redlock::monitor {

namespace {

constexpr size_t k_max_queue = size_t{1} << 20;

const char* reason_word(job::StopReason reason) {
    switch (reason) {
    case job::StopReason::lease_lost:
        return "lost";
    case job::StopReason::force_released:
        return "force-released";
    case job::StopReason::max_hold:
        return "max-hold";
    case job::StopReason::watchdog_gone:
        return "watchdog-gone";
    case job::StopReason::leftovers:
        return "leftovers";
    case job::StopReason::internal:
        return "internal";
    }
    return "internal";
}

const char* vote_word(lock::ServerResult::Vote vote) {
    switch (vote) {
    case lock::ServerResult::Vote::yes:
        return "yes";
    case lock::ServerResult::Vote::no:
        return "no";
    case lock::ServerResult::Vote::failed:
        return "failed";
    case lock::ServerResult::Vote::none:
        break;
    }
    return "none";
}

std::string now_iso() {
    return util::format_utc_timestamp(
        std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now()));
}

} // namespace

util::Expected<std::unique_ptr<EventsObserver>>
EventsObserver::open(const std::string& target, std::string name,
                     std::vector<std::string> secrets) {
    std::unique_ptr<EventsObserver> o(new EventsObserver());
    o->m_target = target;
    o->m_name = std::move(name);
    o->m_secrets = std::move(secrets);
    if (target.starts_with("fd:")) {
        int fd = -1;
        const std::string_view n = std::string_view(target).substr(3);
        if (std::from_chars(n.data(), n.data() + n.size(), fd).ptr != n.data() + n.size() || fd < 0)
            return util::fail(
                util::ErrorKind::usage,
                util::format("--events {}: expected fd:N with N a descriptor number", target));
        if (fd <= STDERR_FILENO)
            return util::fail(util::ErrorKind::usage,
                              util::format("--events {}: stdin, stdout and stderr are not for "
                                           "events (stdout is PROGRAM's); pass another "
                                           "descriptor, such as 3",
                                           target));
        const int flags = ::fcntl(fd, F_GETFL);
        if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY)
            return util::fail(
                util::ErrorKind::usage,
                util::format("--events {}: descriptor {} is not open for writing", target, fd));
        // PROGRAM is not to write into it: it is redlock's.
        ::fcntl(fd, F_SETFD, FD_CLOEXEC);
        o->m_fd = fd;
    } else {
        if (target.empty())
            return util::fail(util::ErrorKind::usage, "--events needs a FILE or fd:N");
        // O_NONBLOCK: a FIFO with no reader fails at once (ENXIO) instead of hanging.
        o->m_owned.reset(
            ::open(target.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0666));
        if (!o->m_owned)
            return util::fail(
                util::ErrorKind::internal,
                util::format("cannot open {} for --events: {}", target, std::strerror(errno)));
        o->m_fd = o->m_owned.get();
    }
    struct stat st {};
    o->m_regular = ::fstat(o->m_fd, &st) == 0 && S_ISREG(st.st_mode);
    return o;
}

std::string EventsObserver::redact(std::string_view text) const {
    return util::redact_secrets(text, m_secrets);
}

util::JsonWriter EventsObserver::begin(std::string_view event) {
    util::JsonWriter w;
    w.begin_object();
    w.field("event", event);
    w.field("at", now_iso());
    w.field("name", m_name);
    w.field("pid", static_cast<long long>(m_pid ? m_pid : ::getpid()));
    return w;
}

void EventsObserver::servers(util::JsonWriter& w, const std::vector<lock::ServerResult>& round) {
    w.key("servers").begin_array();
    for (const auto& r : round) {
        w.begin_object();
        w.field("server", redact(r.server));
        w.field("vote", vote_word(r.vote));
        w.field("detail", redact(r.detail));
        w.field("latency_ms", std::chrono::duration<double, std::milli>(r.latency).count());
        w.end_object();
    }
    w.end_array();
}

void EventsObserver::emit(util::JsonWriter& w) {
    w.end_object();
    std::string line = w.str();
    if (m_queue.size() + line.size() > k_max_queue) {
        m_dropped = true;
        return;
    }
    m_queue += line;
    flush(false);
}

void EventsObserver::flush(bool wait) {
    const auto give_up = util::SteadyClock::now() + std::chrono::seconds(1);
    while (!m_queue.empty() && !m_failed) {
        if (!m_regular) {
            pollfd p{m_fd, POLLOUT, 0};
            const int timeout = wait ? util::poll_timeout_ms(util::SteadyClock::now(), give_up) : 0;
            const int rc = ::poll(&p, 1, timeout);
            if (rc < 0 && errno == EINTR)
                continue;
            if (rc <= 0)
                return; // not now
            if ((p.revents & (POLLERR | POLLHUP)) != 0 && (p.revents & POLLOUT) == 0) {
                m_failed = true;
                util::log::note("--events {}: the reader is gone; no more events are written",
                                m_target);
                return;
            }
        }
        // Whole lines only, each in one write: a reader never sees half of one from us.
        const size_t end = m_queue.find('\n');
        const std::string_view line(m_queue.data(), end + 1);
        const ssize_t n = ::write(m_fd, line.data(), line.size());
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n < 0) {
            m_failed = true;
            util::log::note("cannot write to --events {}: {}", m_target, std::strerror(errno));
            return;
        }
        m_queue.erase(0, static_cast<size_t>(n)); // a partial write keeps the rest in line
    }
}

void EventsObserver::notice(std::string_view text) {
    auto w = begin("notice");
    w.field("text", redact(text));
    emit(w);
}

void EventsObserver::wait_started(std::string_view /*name*/, std::string_view held_by,
                                  const std::vector<lock::ServerResult>& round) {
    auto w = begin("waiting");
    w.field("held_by", held_by);
    servers(w, round);
    emit(w);
}

void EventsObserver::waiting(const job::Waiting& state) {
    auto w = begin("holder");
    w.key("holder");
    if (state.holder_read && state.holder) {
        const auto& h = *state.holder;
        w.begin_object();
        w.field("host", h.host);
        w.field("pid", static_cast<long long>(h.pid));
        w.field("user", h.user);
        w.field("command", redact(h.command));
        w.field("acquired_at", h.acquired_at);
        w.end_object();
    } else {
        w.null();
    }
    w.field("holder_known", state.holder_read);
    if (state.other_holders > 0)
        w.field("other_holders", state.other_holders);
    if (state.queue_position)
        w.field("queue_position", *state.queue_position);
    emit(w);
}

void EventsObserver::acquired(const job::Acquired& what) {
    auto w = begin("acquired");
    w.field("fence", what.fence);
    if (what.limit > 1) {
        w.field("permit", what.permit);
        w.field("limit", what.limit);
    }
    w.field("attempts", what.attempts);
    w.field("waited_ms", std::chrono::duration<double, std::milli>(what.waited).count());
    servers(w, what.servers);
    emit(w);
}

void EventsObserver::not_acquired(const job::NotAcquired& what) {
    using Why = job::NotAcquired::Why;
    auto w = begin("not-acquired");
    w.field("why", what.why == Why::held           ? "held"
                   : what.why == Why::wait_ran_out ? "wait-ran-out"
                                                   : "min-validity");
    w.field("held_by", what.held_by);
    if (what.wait)
        w.field("wait_ms", static_cast<long long>(what.wait->count()));
    emit(w);
}

void EventsObserver::interrupted(int signal) {
    auto w = begin("interrupted");
    w.field("signal", signal);
    emit(w);
}

void EventsObserver::slot_taken(std::string_view /*name*/, job::Millis slot,
                                const std::optional<lock::LastRun>& last) {
    auto w = begin("slot-taken");
    w.field("slot_ms", static_cast<long long>(slot.count()));
    w.key("last");
    if (last) {
        w.begin_object();
        w.field("host", last->who.host);
        w.field("started_at", util::format_utc_timestamp(
                                  util::UtcMillis(std::chrono::milliseconds(last->started_ms))));
        w.end_object();
    } else {
        w.null();
    }
    emit(w);
}

void EventsObserver::program_started(long pid) {
    auto w = begin("started");
    w.field("program_pid", static_cast<long long>(pid));
    emit(w);
}

void EventsObserver::renewed(const std::vector<lock::ServerResult>& round) {
    auto w = begin("renewed");
    servers(w, round);
    emit(w);
}

void EventsObserver::renewal_failed(const std::vector<lock::ServerResult>& round, bool first) {
    auto w = begin("renewal-failed");
    w.field("first", first);
    servers(w, round);
    emit(w);
}

void EventsObserver::renewal_recovered() {
    auto w = begin("renewal-recovered");
    emit(w);
}

void EventsObserver::stopping(job::StopReason reason, std::string_view why) {
    // A lost lease's line waits for catch_up() if the reader is slow: queued, never
    // blocking the TERM (emit only writes what can be written at once).
    auto w = begin("stopping");
    w.field("reason", reason_word(reason));
    w.field("why", redact(why));
    emit(w);
}

void EventsObserver::program_exited(int wait_status) {
    auto w = begin("exited");
    if (WIFSIGNALED(wait_status)) {
        w.field("exit_status", 128 + WTERMSIG(wait_status));
        w.field("signal", WTERMSIG(wait_status));
    } else {
        w.field("exit_status", WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1);
    }
    emit(w);
}

void EventsObserver::released(const std::vector<lock::ServerResult>& round) {
    auto w = begin("released");
    servers(w, round);
    emit(w);
}

void EventsObserver::kept(job::Millis left, job::Millis min_hold) {
    auto w = begin("kept");
    w.field("left_ms", static_cast<long long>(left.count()));
    w.field("min_hold_ms", static_cast<long long>(min_hold.count()));
    emit(w);
}

void EventsObserver::finish(const job::RunResult& result, int exit_status) {
    auto w = begin("end");
    w.field("outcome", job::outcome_name(result.outcome));
    w.field("exit_status", exit_status);
    if (result.error)
        w.field("error", redact(result.error->message));
    emit(w);
    flush(true);
    if (!m_queue.empty() && !m_failed)
        util::log::note("--events {}: the reader did not take the last events in time; "
                        "{} bytes dropped",
                        m_target, m_queue.size());
    if (m_dropped)
        util::log::note("--events {}: the reader fell more than 1 MiB behind; some events "
                        "were dropped",
                        m_target);
}

} // namespace redlock::monitor
