#include "monitor/metrics_observer.hpp"

#include <algorithm>
#include <unistd.h>

#include "monitor/metrics_file.hpp"
#include "process/identity.hpp"
#include "util/log.hpp"

namespace redlock::monitor {

namespace {

double unix_seconds(std::chrono::system_clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
}

double seconds(job::Clock::duration d) {
    return std::max(0.0, std::chrono::duration<double>(d).count());
}

// Whether the run recorded as running is still alive: the same process, not a later one
// that got its pid.
bool alive(const RunningRun& run) {
    auto id = process::identity(static_cast<pid_t>(run.pid));
    return id && *id == run.identity;
}

} // namespace

MetricsObserver::MetricsObserver(std::string name, std::filesystem::path file)
    : m_name(std::move(name)), m_file(std::move(file)),
      m_start_wall(std::chrono::system_clock::now()), m_start(job::Clock::now()) {}

void MetricsObserver::started_at(std::chrono::system_clock::time_point wall,
                                 job::Clock::time_point start,
                                 std::optional<job::Clock::time_point> acquired) {
    m_start_wall = wall;
    m_start = start;
    m_acquired = acquired;
}

void MetricsObserver::acquired(const job::Acquired& /*what*/) {
    m_acquired = job::Clock::now();
}

void MetricsObserver::released(const std::vector<lock::ServerResult>& /*round*/) {
    if (m_acquired && !m_let_go)
        m_let_go = job::Clock::now();
}

void MetricsObserver::kept(job::Millis /*left*/, job::Millis /*min_hold*/) {
    if (m_acquired && !m_let_go)
        m_let_go = job::Clock::now();
}

void MetricsObserver::program_started(long /*pid*/) {
    const long self = ::getpid();
    auto identity = process::identity(static_cast<pid_t>(self));
    const double since = unix_seconds(std::chrono::system_clock::now());
    // PROGRAM runs and the lease is ticking: this write must not hold up the supervisor
    // (observers never block the locking), so the lock of the file is waited for briefly
    // only. Missed, the running gauge misses this run; the counts at the end do not.
    write(std::chrono::milliseconds(50), [&](MetricsFile& file) {
        auto& runs = file[m_name].running;
        std::erase_if(runs, [&](const RunningRun& r) { return r.pid == self || !alive(r); });
        runs.push_back(RunningRun{self, identity.value_or(""), since});
    });
}

void MetricsObserver::finish(const job::RunResult& result, int exit_status) {
    const auto now = job::Clock::now();
    const auto end_wall = std::chrono::system_clock::now();
    LastRun last;
    last.start = unix_seconds(m_start_wall);
    last.end = unix_seconds(end_wall);
    last.wait = seconds((m_acquired ? *m_acquired : now) - m_start);
    last.held = m_acquired ? seconds(m_let_go.value_or(now) - *m_acquired) : 0.0;
    last.exit_status = exit_status;
    last.outcome = job::outcome_name(result.outcome);
    const long self = ::getpid();
    // After the release: the lock of the file may be waited for longer.
    write(std::chrono::milliseconds(2000), [&](MetricsFile& file) {
        auto& entry = file[m_name];
        entry.last = last;
        ++entry.runs_total[last.outcome];
        std::erase_if(entry.running,
                      [&](const RunningRun& r) { return r.pid == self || !alive(r); });
    });
}

void MetricsObserver::write(std::chrono::milliseconds lock_wait,
                            const std::function<void(MetricsFile&)>& change) {
    auto ok = update_metrics_file(m_file, change, lock_wait);
    if (ok)
        return;
    if (ok.error().message != m_said)
        util::log::note("{}", ok.error().message);
    m_said = ok.error().message;
}

} // namespace redlock::monitor
