#pragma once
// What a run records in its name's history (lock/history.hpp): who it is, and how it
// ended. With history = 0 no entry is kept, but the name's counters still count it (the
// script writes them with the entry: lock/scripts.hpp, k_history_counters). The run's id
// is the first half of its first token: unique, and no secret once the run has ended.
// Used by the run itself, and by the releaser of a run whose redlock died
// (job/dead_run.hpp).

#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "job/events.hpp"
#include "lock/history.hpp"
#include "lock/holder.hpp"

namespace redlock::job {

class Recorder {
  public:
    // The run `run` (its id) of `holder`, which started waiting at `started`; a
    // `--once-per` run's slot goes to the counters too, for the overdue alert.
    Recorder(const config::Config& config, const lock::Holder& holder, std::string run,
             Clock::time_point started, std::optional<Millis> once_per);

    // The id of the run whose first token is `token`.
    [[nodiscard]] static std::string run_id(std::string_view token) {
        return std::string(token.substr(0, 16));
    }
    // This run's id.
    [[nodiscard]] const std::string& run() const { return m_run; }

    // For the last attempt of a run that will not wait on (job::acquire fills in the
    // outcome and the time waited); null for a run that waits as long as it takes.
    [[nodiscard]] const lock::HistoryRecord* skip(bool can_give_up);
    void acquired(Clock::time_point at) { m_acquired = at; }
    // A cron slot's run: its entries name the slot (ms since the epoch), and keep the
    // name's record until `keep_until_ms` at least (the slot's record's need).
    void set_slot(long long slot_ms, std::optional<long long> keep_until_ms = std::nullopt) {
        m_slot_ms = slot_ms;
        m_keep_until_ms = keep_until_ms;
    }
    // The run ended at `at` (PROGRAM's tree gone), before its entry is made: the entry says
    // so, not when it was made or sent (else: then).
    void finished(Clock::time_point at) { m_finished = at; }

    // The entry of a run that got the lock (or, before that, was stopped), as it ends; a
    // `note` says more (why a killed run's lock keeps its TTL).
    [[nodiscard]] std::optional<lock::HistoryRecord>
    ended(Outcome outcome, std::optional<int> status, long long fence,
          const std::optional<lock::Holder>& by = std::nullopt, std::string_view note = {}) const;

    // The entry of a cron slot that no run made (missed, skipped-overlap), recorded by this
    // run: under an id that is the same wherever it is written (lock::slot_entry_id), so
    // that it is kept once.
    [[nodiscard]] lock::HistoryRecord slot_entry(std::string_view name, long long slot_ms,
                                                 Outcome outcome) const;

  private:
    [[nodiscard]] lock::HistoryRecord base(std::string_view run,
                                           std::optional<long long> slot_ms) const;
    [[nodiscard]] lock::HistoryRecord base() const { return base(m_run, m_slot_ms); }

    const config::Config& m_config;
    const lock::Holder& m_holder;
    std::string m_run;
    std::optional<Millis> m_once_per;
    std::optional<long long> m_slot_ms;
    std::optional<long long> m_keep_until_ms;
    Clock::time_point m_started;
    std::optional<Clock::time_point> m_acquired;
    std::optional<Clock::time_point> m_finished;
    std::optional<lock::HistoryRecord> m_skip;
};

} // namespace redlock::job
