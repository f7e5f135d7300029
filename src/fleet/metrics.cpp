#include "fleet/metrics.hpp"

#include <algorithm>

#include "job/events.hpp"
#include "monitor/prometheus.hpp"
#include "util/format.hpp"

namespace redlock::fleet {

namespace {

std::string seconds(long long ms) {
    return util::format("{}.{:03}", ms / 1000, ms % 1000);
}

// One family: HELP and TYPE, then its samples.
class Family {
  public:
    Family(std::string& out, std::string_view name, std::string_view type, std::string_view help)
        : m_out(out), m_name(name) {
        m_out += util::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    }
    // A sample of the family itself, or of one of its series (`suffix`: "_bucket"...).
    void sample(std::string_view labels, std::string_view value, std::string_view suffix = {}) {
        m_out += util::format("{}{}{{{}}} {}\n", m_name, suffix, labels, value);
    }

  private:
    std::string& m_out;
    std::string_view m_name;
};

std::string name_label(const std::string& name) {
    return util::format("name=\"{}\"", monitor::escape_label_value(name));
}

// How long the holder has held it, from its metadata's acquired_at.
std::optional<long long> held_ms(const LockRecord& r, util::UtcMillis now) {
    if (r.view.state != lock::LockState::held || !r.view.holder)
        return std::nullopt;
    auto since = util::parse_utc_timestamp(r.view.holder->acquired_at);
    if (!since)
        return std::nullopt;
    return std::max<long long>((now - *since).count(), 0);
}

std::optional<long long> slot_of(const LockRecord& r) {
    if (r.counters.slot_ms)
        return r.counters.slot_ms;
    if (r.view.last_run)
        return r.view.last_run->slot_ms;
    return std::nullopt;
}

} // namespace

bool overdue(std::optional<long long> slot_ms, std::optional<long long> last_success_ms,
             util::UtcMillis now) {
    if (!slot_ms || *slot_ms <= 0)
        return false;
    if (!last_success_ms)
        return true;
    const long long grace = std::min<long long>(*slot_ms / 10, 3'600'000);
    return now.time_since_epoch().count() - *last_success_ms > *slot_ms + grace;
}

std::string render_metrics(const Fleet& fleet, util::UtcMillis now) {
    std::string out;
    out.reserve(512 + fleet.locks().size() * 2048);
    const auto& locks = fleet.locks();
    {
        Family f(out, "redlock_server_up", "gauge",
                 "Whether the server answered the exporter's last reading (1) or not (0).");
        for (const auto& s : fleet.servers())
            f.sample(util::format("server=\"{}\"", monitor::escape_label_value(s.name)),
                     s.up ? "1" : "0");
    }
    {
        Family f(out, "redlock_held", "gauge",
                 "Whether the lock is held (1: by a majority of the servers) or not (0).");
        for (const auto& [name, e] : locks)
            f.sample(name_label(name), e.record.view.state == lock::LockState::held ? "1" : "0");
    }
    {
        Family f(out, "redlock_held_seconds", "gauge",
                 "How long its holder has held the lock (from the holder's metadata).");
        for (const auto& [name, e] : locks)
            if (auto ms = held_ms(e.record, now))
                f.sample(name_label(name), seconds(*ms));
    }
    {
        Family f(out, "redlock_waiters", "gauge",
                 "Runs waiting for the lock: on its wait list, listening for its release, or "
                 "in its --fair queue.");
        for (const auto& [name, e] : locks)
            f.sample(name_label(name), std::to_string(e.record.waiters + e.record.queue));
    }
    {
        Family f(out, "redlock_permits_held", "gauge", "Permits of a --limit name that are held.");
        for (const auto& [name, e] : locks)
            if (e.record.view.limit > 0)
                f.sample(name_label(name), std::to_string(e.record.view.held_permits().size()));
    }
    {
        Family f(out, "redlock_limit", "gauge", "N of a --limit name.");
        for (const auto& [name, e] : locks)
            if (e.record.view.limit > 0)
                f.sample(name_label(name), std::to_string(e.record.view.limit));
    }
    {
        Family f(out, "redlock_runs_total", "counter",
                 "Runs by outcome (the words of `redlock history`), counted on the servers "
                 "with each release or refusal: the largest count of any server.");
        for (const auto& [name, e] : locks) {
            const auto& c = e.record.counters;
            if (c.empty())
                continue;
            // Every outcome from the start (0 until it happens), so that increase() sees
            // the first; then any other word the servers counted.
            std::map<std::string, long long> runs;
            for (auto o : job::k_outcomes)
                runs[job::outcome_name(o)] = 0;
            for (const auto& [outcome, n] : c.runs)
                runs[outcome] = n;
            for (const auto& [outcome, n] : runs)
                f.sample(util::format("{},outcome=\"{}\"", name_label(name),
                                      monitor::escape_label_value(outcome)),
                         std::to_string(n));
        }
    }
    {
        Family f(out, "redlock_last_success_timestamp_seconds", "gauge",
                 "When the last run that ran PROGRAM and exited 0 ended (servers' clock); 0: "
                 "never.");
        for (const auto& [name, e] : locks)
            if (!e.record.counters.empty())
                f.sample(name_label(name), seconds(e.record.counters.last_success_ms.value_or(0)));
    }
    {
        Family f(out, "redlock_last_run_timestamp_seconds", "gauge",
                 "When the last run that ran PROGRAM ended, whatever its outcome (servers' "
                 "clock).");
        for (const auto& [name, e] : locks)
            if (e.record.counters.last_run_ms)
                f.sample(name_label(name), seconds(*e.record.counters.last_run_ms));
    }
    {
        Family f(out, "redlock_run_duration_seconds", "histogram",
                 "How long the runs that ran PROGRAM held the lock.");
        for (const auto& [name, e] : locks) {
            const auto& c = e.record.counters;
            if (c.empty())
                continue;
            long long total = 0;
            for (size_t i = 0; i < k_duration_buckets.size(); ++i) {
                total += c.durations[i];
                f.sample(util::format("{},le=\"{}\"", name_label(name), k_duration_buckets[i]),
                         std::to_string(total), "_bucket");
            }
            total += c.durations.back();
            f.sample(util::format("{},le=\"+Inf\"", name_label(name)), std::to_string(total),
                     "_bucket");
            f.sample(name_label(name), seconds(c.duration_sum_ms), "_sum");
            f.sample(name_label(name), std::to_string(total), "_count");
        }
    }
    {
        Family f(out, "redlock_slot_seconds", "gauge",
                 "The slot of a --once-per name (at most one run per slot).");
        for (const auto& [name, e] : locks)
            if (auto slot = slot_of(e.record))
                f.sample(name_label(name), seconds(*slot));
    }
    {
        Family f(out, "redlock_overdue", "gauge",
                 "Whether a --once-per name had no success within its slot and a tenth of it "
                 "(at most an hour) more (1), on the exporter's clock.");
        for (const auto& [name, e] : locks)
            if (auto slot = slot_of(e.record))
                f.sample(name_label(name),
                         overdue(slot, e.record.counters.last_success_ms, now) ? "1" : "0");
    }
    return out;
}

} // namespace redlock::fleet
