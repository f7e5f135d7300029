#pragma once
// The engine's events (job/events.hpp) as redlock has always said them on stderr: notes
// and errors as "redlock: ..." lines, -v detail, and the progress line while waiting
// (cli/progress.hpp). Nothing with -q but errors.

#include <optional>
#include <string>

#include "cli/progress.hpp"
#include "job/events.hpp"

namespace redlock::cli {

class StderrObserver final : public job::Observer {
  public:
    explicit StderrObserver(std::string name) : m_name(std::move(name)) {}

    void notice(std::string_view text) override;
    void wait_started(std::string_view name, std::string_view held_by,
                      const std::vector<lock::ServerResult>& round) override;
    [[nodiscard]] bool wants_holder() const override;
    void waiting(const job::Waiting& state) override;
    job::Clock::time_point tick(job::Clock::time_point now) override;
    void wait_ended() override { m_progress.reset(); }
    void acquired(const job::Acquired& what) override;
    void not_acquired(const job::NotAcquired& what) override;
    void slot_taken(std::string_view name, job::Millis slot,
                    const std::optional<lock::LastRun>& last) override;
    void renewed(const std::vector<lock::ServerResult>& round) override;
    void renewal_failed(const std::vector<lock::ServerResult>& round, bool first) override;
    void renewal_recovered() override;
    void stopping(job::StopReason reason, std::string_view why) override;
    void catch_up() override;
    void released(const std::vector<lock::ServerResult>& round) override;
    void kept(job::Millis left, job::Millis min_hold) override;

  private:
    std::string m_name;
    std::optional<WaitProgress> m_progress;
    std::string m_unsaid; // a lost lease's line that stderr could not take at once
};

} // namespace redlock::cli
