#pragma once
// `run --events FILE|fd:N`: every event of the run as one JSON object per line (JSON
// Lines), each with at least "event" (its kind), "at" (ISO 8601 UTC, milliseconds),
// "name" (the lock) and "pid" (this redlock, which tells apart the runs that share a
// file), written with one write(2) per line as it happens. A FILE is appended to (created
// 0666 less the umask). A reader that does not keep up never slows the run: a line the
// pipe cannot take at once waits in memory (up to 1 MiB) for the next event, and for up
// to a second at the end. Commands and messages are redacted as everywhere else.

#include <memory>
#include <string>
#include <vector>

#include "job/events.hpp"
#include "job/run.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/json.hpp"

namespace redlock::monitor {

class EventsObserver final : public job::Observer {
  public:
    // `target`: a file name, or "fd:N" for an inherited descriptor.
    [[nodiscard]] static util::Expected<std::unique_ptr<EventsObserver>>
    open(const std::string& target, std::string name, std::vector<std::string> secrets);

    void notice(std::string_view text) override;
    void wait_started(std::string_view name, std::string_view held_by,
                      const std::vector<lock::ServerResult>& round) override;
    void waiting(const job::Waiting& state) override;
    void acquired(const job::Acquired& what) override;
    void not_acquired(const job::NotAcquired& what) override;
    void interrupted(int signal) override;
    void slot_taken(std::string_view name, job::Millis slot,
                    const std::optional<lock::LastRun>& last) override;
    void program_started(long pid) override;
    void renewed(const std::vector<lock::ServerResult>& round) override;
    void renewal_failed(const std::vector<lock::ServerResult>& round, bool first) override;
    void renewal_recovered() override;
    void stopping(job::StopReason reason, std::string_view why) override;
    void catch_up() override { flush(false); }
    void program_exited(int wait_status) override;
    void released(const std::vector<lock::ServerResult>& round) override;
    void kept(job::Millis left, job::Millis min_hold) override;

    // The last line, "end": the run's outcome and exit status; then what is left queued.
    void finish(const job::RunResult& result, int exit_status);
    // The run's redlock, when another process reports for it (the releaser of a killed
    // run, job/dead_run.hpp): every line names it instead.
    void speak_for(long pid) { m_pid = pid; }

  private:
    EventsObserver() = default;
    util::JsonWriter begin(std::string_view event);
    void servers(util::JsonWriter& w, const std::vector<lock::ServerResult>& round);
    [[nodiscard]] std::string redact(std::string_view text) const;
    void emit(util::JsonWriter& w);
    // Writes what is queued; with `wait`, waits up to a second for a slow reader.
    void flush(bool wait);

    std::string m_target;
    util::UniqueFd m_owned; // a FILE opened here
    int m_fd = -1;
    bool m_regular = false; // a regular file: a write never waits for a reader
    std::string m_name;
    std::vector<std::string> m_secrets;
    std::string m_queue; // lines not yet written
    bool m_dropped = false;
    bool m_failed = false;
    long m_pid = 0; // 0: this process
};

} // namespace redlock::monitor
