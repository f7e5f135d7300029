#include "job/recorder.hpp"

#include "lock/cron_slot.hpp"

namespace redlock::job {

Recorder::Recorder(const config::Config& config, const lock::Holder& holder, std::string run,
                   Clock::time_point started, std::optional<Millis> once_per)
    : m_config(config), m_holder(holder), m_run(std::move(run)), m_once_per(once_per),
      m_started(started) {}

const lock::HistoryRecord* Recorder::skip(bool can_give_up) {
    if (!can_give_up)
        return nullptr;
    m_skip = base();
    return &*m_skip;
}

std::optional<lock::HistoryRecord> Recorder::ended(Outcome outcome, std::optional<int> status,
                                                   long long fence,
                                                   const std::optional<lock::Holder>& by,
                                                   std::string_view note) const {
    auto record = base();
    const auto end = m_finished.value_or(Clock::now());
    const auto acquired = m_acquired.value_or(end);
    record.waited = std::chrono::floor<Millis>(acquired - m_started);
    record.held = std::chrono::floor<Millis>(end - acquired);
    record.ended = end;
    record.add("outcome", outcome_name(outcome));
    if (status)
        record.add("status", std::to_string(*status));
    if (fence > 0)
        record.add("fence", std::to_string(fence));
    if (by) {
        record.add("by_host", by->host);
        record.add("by_pid", std::to_string(by->pid));
        record.add("by_user", by->user);
    }
    if (!note.empty())
        record.add("note", note);
    return record;
}

lock::HistoryRecord Recorder::slot_entry(std::string_view name, long long slot_ms,
                                         Outcome outcome) const {
    auto record = base(lock::slot_entry_id(name, slot_ms, outcome_name(outcome)), slot_ms);
    record.add("outcome", outcome_name(outcome));
    return record;
}

lock::HistoryRecord Recorder::base(std::string_view run, std::optional<long long> slot_ms) const {
    lock::HistoryRecord record;
    record.keep = m_config.history;
    record.max_age = m_config.history_max_age;
    record.keep_until_ms = m_keep_until_ms;
    record.fields.reserve(160 + m_holder.command.size());
    record.add("run", run);
    record.add("host", m_holder.host);
    record.add("pid", std::to_string(m_holder.pid));
    record.add("user", m_holder.user);
    record.add("command", m_holder.command);
    if (m_once_per) // the counters keep the slot, for the overdue alert
        record.add("slot_ms", std::to_string(m_once_per->count()));
    if (slot_ms)
        record.add("slot", std::to_string(*slot_ms));
    return record;
}

} // namespace redlock::job
