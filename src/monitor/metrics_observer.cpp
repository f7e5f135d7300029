#include "monitor/metrics_observer.hpp"

#include <algorithm>
#include <sys/stat.h>
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

// Our pid namespace: the inode of /proc/self/ns/pid (0 if it cannot be told).
unsigned long long pid_namespace() {
    struct stat st {};
    return ::stat("/proc/self/ns/pid", &st) == 0 ? st.st_ino : 0;
}

// What happens to run record `run` when run `self` of namespace `ns` (its identity
// `identity`) writes: true when it goes. Ours goes (it is written anew or ends). Another
// of our namespace goes once it is not alive: not the same process, but a later one that
// got its pid, or none. One of another namespace (a container sharing the directory)
// cannot be looked at from here: it stays, unless the host has rebooted since (its boot
// id, the part of its identity before '/', is not ours).
bool goes(const RunningRun& run, long self, unsigned long long ns, const std::string& identity) {
    if (run.pid_ns != 0 && run.pid_ns != ns) {
        const auto boot = [](std::string_view id) { return id.substr(0, id.find('/')); };
        return !identity.empty() && boot(run.identity) != boot(identity);
    }
    if (run.pid == self)
        return true;
    auto id = process::identity(static_cast<pid_t>(run.pid));
    return !id || *id != run.identity;
}

} // namespace

MetricsObserver::MetricsObserver(std::string name, std::filesystem::path file)
    : m_name(std::move(name)), m_file(std::move(file)),
      m_start_wall(std::chrono::system_clock::now()), m_start(job::Clock::now()),
      m_identity(process::identity(::getpid()).value_or("")), m_pid_ns(pid_namespace()) {}

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
    const double since = unix_seconds(std::chrono::system_clock::now());
    // PROGRAM runs and the lease is ticking: this write must not hold up the supervisor
    // (observers never block the locking), so the lock of the file is waited for briefly
    // only. Missed, the running gauge misses this run; the counts at the end do not.
    write(std::chrono::milliseconds(50), [&](MetricsFile& file) {
        auto& runs = file[m_name].running;
        std::erase_if(runs,
                      [&](const RunningRun& r) { return goes(r, self, m_pid_ns, m_identity); });
        runs.push_back(RunningRun{self, m_identity, since, m_pid_ns});
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
                      [&](const RunningRun& r) { return goes(r, self, m_pid_ns, m_identity); });
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
