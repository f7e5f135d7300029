#pragma once
// `run --metrics`: the run as Prometheus metrics (monitor/prometheus.hpp) in a file that
// node_exporter's textfile collector reads. Written twice: when PROGRAM starts (the
// running gauge), and once the run is over (the last run, its outcome, the counters). A
// file that cannot be written is a note on stderr; the run goes on unchanged.

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "job/events.hpp"
#include "job/run.hpp"
#include "monitor/prometheus.hpp"

namespace redlock::monitor {

class MetricsObserver final : public job::Observer {
  public:
    MetricsObserver(std::string name, std::filesystem::path file);

    void acquired(const job::Acquired& what) override;
    void program_started(long pid) override;
    void released(const std::vector<lock::ServerResult>& round) override;
    void kept(job::Millis left, job::Millis min_hold) override;

    // The run is over, with this result and exit status.
    void finish(const job::RunResult& result, int exit_status);
    // A run that started (and acquired) earlier, in another process: the releaser of a
    // killed run reports its end (job/dead_run.hpp).
    void started_at(std::chrono::system_clock::time_point wall, job::Clock::time_point start,
                    std::optional<job::Clock::time_point> acquired);

  private:
    void write(std::chrono::milliseconds lock_wait,
               const std::function<void(MetricsFile&)>& change);

    std::string m_name;
    std::filesystem::path m_file;
    std::chrono::system_clock::time_point m_start_wall;
    job::Clock::time_point m_start;
    std::optional<job::Clock::time_point> m_acquired;
    std::optional<job::Clock::time_point> m_let_go; // released, or kept for --min-hold
    std::string m_said;                             // the last failure said, not said twice
    // This run's process: its identity and pid namespace, as its record has them.
    std::string m_identity;
    unsigned long long m_pid_ns = 0;
};

} // namespace redlock::monitor
