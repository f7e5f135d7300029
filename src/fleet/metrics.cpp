#include "fleet/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <vector>

#include "job/events.hpp"
#include "monitor/prometheus.hpp"
#include "util/count.hpp"

namespace redlock::fleet {

namespace {

// Appends the decimal `value` (seconds as "S.mmm" when `ms`): no format string per sample, a
// thousand names are thirty thousand samples.
void number(std::string& out, long long value) {
    char text[24];
    auto [end, ec] = std::to_chars(text, text + sizeof text, value);
    out.append(text, end);
}
void seconds(std::string& out, long long ms) {
    if (ms < 0) {
        out.push_back('-');
        ms = -ms;
    }
    number(out, ms / 1000);
    const long long frac = ms % 1000;
    out.push_back('.');
    out.push_back(static_cast<char>('0' + frac / 100));
    out.push_back(static_cast<char>('0' + frac / 10 % 10));
    out.push_back(static_cast<char>('0' + frac % 10));
}

// One family: HELP and TYPE, then its samples, each `<family><suffix>{<labels>} <value>`.
class Family {
  public:
    Family(std::string& out, std::string_view name, std::string_view type, std::string_view help)
        : m_out(out), m_name(name) {
        m_out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ");
        m_out.append(name).append(" ").append(type).append("\n");
    }
    // Starts a sample (`labels` and `more`: the braces' inside); the value follows.
    void sample(std::string_view labels, std::string_view suffix = {}, std::string_view more = {}) {
        m_out.append(m_name).append(suffix).append("{").append(labels);
        if (!more.empty())
            m_out.append(",").append(more);
        m_out.append("} ");
    }
    void value(long long n) {
        number(m_out, n);
        m_out.push_back('\n');
    }
    void seconds_value(long long ms) {
        seconds(m_out, ms);
        m_out.push_back('\n');
    }

  private:
    std::string& m_out;
    std::string_view m_name;
};

std::string name_label(const std::string& name) {
    return "name=\"" + monitor::escape_label_value(name) + "\"";
}

} // namespace

std::optional<long long> held_ms(const LockRecord& r, util::UtcMillis now) {
    if (r.view.state != lock::LockState::held || !r.view.holder)
        return std::nullopt;
    auto since = util::parse_utc_timestamp(r.view.holder->acquired_at);
    if (!since || !util::plausible_ms(since->time_since_epoch().count()))
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
    const auto& locks = fleet.locks();
    out.reserve(4096 + locks.size() * 2400);
    // Each name's label, escaped once.
    std::vector<std::pair<const Fleet::Entry*, std::string>> names;
    names.reserve(locks.size());
    for (const auto& [name, e] : locks)
        names.emplace_back(&e, name_label(name));
    {
        Family f(out, "redlock_server_up", "gauge",
                 "Whether the server answered the exporter's last reading (1) or not (0).");
        for (const auto& s : fleet.servers()) {
            f.sample("server=\"" + monitor::escape_label_value(s.name) + "\"");
            f.value(s.up ? 1 : 0);
        }
    }
    {
        Family f(out, "redlock_held", "gauge",
                 "Whether the lock is held (1: by a majority of the servers) or not (0).");
        for (const auto& [e, label] : names) {
            f.sample(label);
            f.value(e->record.view.state == lock::LockState::held ? 1 : 0);
        }
    }
    {
        Family f(out, "redlock_held_seconds", "gauge",
                 "How long its holder has held the lock (from the holder's metadata).");
        for (const auto& [e, label] : names)
            if (auto ms = held_ms(e->record, now)) {
                f.sample(label);
                f.seconds_value(*ms);
            }
    }
    {
        Family f(out, "redlock_waiters", "gauge",
                 "Runs waiting for the lock: on its wait list, listening for its release, or "
                 "in its --fair queue.");
        for (const auto& [e, label] : names) {
            f.sample(label);
            f.value(util::add_counts(e->record.waiters, e->record.queue));
        }
    }
    {
        Family f(out, "redlock_permits_held", "gauge", "Permits of a --limit name that are held.");
        for (const auto& [e, label] : names)
            if (e->record.view.limit > 0) {
                f.sample(label);
                f.value(static_cast<long long>(e->record.view.held_permits().size()));
            }
    }
    {
        Family f(out, "redlock_limit", "gauge", "N of a --limit name.");
        for (const auto& [e, label] : names)
            if (e->record.view.limit > 0) {
                f.sample(label);
                f.value(static_cast<long long>(e->record.view.limit));
            }
    }
    {
        Family f(out, "redlock_runs_total", "counter",
                 "Runs by outcome (the words of `redlock history`), counted on the servers "
                 "with each release or refusal: the largest count of any server.");
        // Every outcome from the start (0 until it happens), so that increase() sees the
        // first; then any other word the servers counted.
        std::map<std::string, long long> runs;
        std::map<std::string, std::string> outcome_labels;
        for (const auto& [e, label] : names) {
            const auto& c = e->record.counters;
            if (c.empty())
                continue;
            runs.clear();
            for (auto o : job::k_outcomes)
                runs[job::outcome_name(o)] = 0;
            for (const auto& [outcome, n] : c.runs)
                runs[outcome] = n;
            for (const auto& [outcome, n] : runs) {
                auto& more = outcome_labels[outcome];
                if (more.empty())
                    more = "outcome=\"" + monitor::escape_label_value(outcome) + "\"";
                f.sample(label, {}, more);
                f.value(n);
            }
        }
    }
    {
        Family f(out, "redlock_last_success_timestamp_seconds", "gauge",
                 "When the last run that ran PROGRAM and exited 0 ended (servers' clock); 0: "
                 "never.");
        for (const auto& [e, label] : names)
            if (!e->record.counters.empty()) {
                f.sample(label);
                f.seconds_value(e->record.counters.last_success_ms.value_or(0));
            }
    }
    {
        Family f(out, "redlock_last_run_timestamp_seconds", "gauge",
                 "When the last run that ran PROGRAM ended, whatever its outcome (servers' "
                 "clock).");
        for (const auto& [e, label] : names)
            if (e->record.counters.last_run_ms) {
                f.sample(label);
                f.seconds_value(*e->record.counters.last_run_ms);
            }
    }
    {
        Family f(out, "redlock_run_duration_seconds", "histogram",
                 "How long the runs that ran PROGRAM held the lock.");
        std::vector<std::string> bounds;
        for (auto b : k_duration_buckets)
            bounds.push_back("le=\"" + std::to_string(b) + "\"");
        bounds.emplace_back("le=\"+Inf\"");
        for (const auto& [e, label] : names) {
            const auto& c = e->record.counters;
            if (c.empty())
                continue;
            long long total = 0;
            for (size_t i = 0; i < bounds.size(); ++i) {
                total = util::add_counts(total, c.durations[i]);
                f.sample(label, "_bucket", bounds[i]);
                f.value(total);
            }
            if (c.duration_sum_ms) { // (unknown: not served)
                f.sample(label, "_sum");
                f.seconds_value(*c.duration_sum_ms);
            }
            f.sample(label, "_count");
            f.value(total);
        }
    }
    {
        Family f(out, "redlock_slot_seconds", "gauge",
                 "The slot of a --once-per name (at most one run per slot).");
        for (const auto& [e, label] : names)
            if (auto slot = slot_of(e->record)) {
                f.sample(label);
                f.seconds_value(*slot);
            }
    }
    {
        Family f(out, "redlock_overdue", "gauge",
                 "Whether a --once-per name had no success within its slot and a tenth of it "
                 "(at most an hour) more (1), on the exporter's clock.");
        for (const auto& [e, label] : names)
            if (auto slot = slot_of(e->record)) {
                f.sample(label);
                f.value(overdue(slot, e->record.counters.last_success_ms, now) ? 1 : 0);
            }
    }
    return out;
}

} // namespace redlock::fleet
