#include "fleet/metrics.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <utility>

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

// `name="<name>"`, escaped as a label value wants (lock names need none: the fleet keeps
// only names that are checked, so this is a loop over a few characters per sample).
void name_label(std::string& out, const std::string& name) {
    out.append("name=\"");
    if (std::ranges::none_of(name, [](char c) { return c == '\\' || c == '"' || c == '\n'; }))
        out.append(name);
    else
        out.append(monitor::escape_label_value(name));
    out.push_back('"');
}

// One family: its HELP and TYPE, and what it says of each name (nothing, for a series that
// would say nothing). `sample` starts a sample: `<family><suffix>{name="...",<more>} `.
struct Family {
    std::string_view name;
    std::string_view type;
    std::string_view help;
    void (*write)(const Family& f, std::string& out, const std::string& name, const LockRecord& r,
                  util::UtcMillis now);

    void sample(std::string& out, const std::string& lock, std::string_view suffix = {},
                std::initializer_list<std::string_view> more = {}) const {
        out.append(name).append(suffix).push_back('{');
        name_label(out, lock);
        for (auto piece : more)
            out.append(piece);
        out.append("} ");
    }
};

void value(std::string& out, long long n) {
    number(out, n);
    out.push_back('\n');
}
void seconds_value(std::string& out, long long ms) {
    seconds(out, ms);
    out.push_back('\n');
}

// The duration histogram's bounds (k_duration_buckets, then +Inf) as labels.
constexpr std::array<std::string_view, k_duration_buckets.size() + 1> k_bounds = {
    "le=\"1\"",    "le=\"5\"",     "le=\"10\"",    "le=\"30\"",    "le=\"60\"",
    "le=\"120\"",  "le=\"300\"",   "le=\"600\"",   "le=\"1800\"",  "le=\"3600\"",
    "le=\"7200\"", "le=\"14400\"", "le=\"43200\"", "le=\"86400\"", "le=\"+Inf\""};
static_assert([] {
    for (size_t i = 0; i < k_duration_buckets.size(); ++i) {
        long long n = 0;
        for (char c : k_bounds[i].substr(4, k_bounds[i].size() - 5))
            n = n * 10 + (c - '0');
        if (n != k_duration_buckets[i])
            return false;
    }
    return true;
}());

// The families of a name, in the order served.
const std::array<Family, 14> k_families = {{
    {"redlock_held", "gauge",
     "Whether the lock is held (1: by a majority of the servers) or not (0).",
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis) {
         f.sample(out, name);
         value(out, r.view.state == lock::LockState::held ? 1 : 0);
     }},
    {"redlock_held_seconds", "gauge",
     "How long its holder has held the lock (from the holder's metadata).",
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis now) {
         if (auto ms = held_ms(r, now)) {
             f.sample(out, name);
             seconds_value(out, *ms);
         }
     }},
    {"redlock_waiters", "gauge",
     "Runs waiting for the lock: on its wait list, listening for its release, or in its --fair "
     "queue.",
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis) {
         f.sample(out, name);
         value(out, util::add_counts(r.waiters, r.queue));
     }},
    {"redlock_permits_held", "gauge", "Permits of a --limit name that are held.",
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis) {
         if (r.view.limit > 0) {
             f.sample(out, name);
             value(out, static_cast<long long>(r.view.permits_held));
         }
     }},
    {"redlock_limit", "gauge", "N of a --limit name.",
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis) {
         if (r.view.limit > 0) {
             f.sample(out, name);
             value(out, static_cast<long long>(r.view.limit));
         }
     }},
    {"redlock_runs_total", "counter",
     "Runs by outcome (the words of `redlock history`), counted on the servers with each "
     "release or refusal: the largest count of any server. A series appears with the first run "
     "of its outcome.",
     // (An outcome that never happened to a name says nothing: no series, as a fleet of
     // 100,000 names would otherwise serve a dozen zeros each.)
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis) {
         for (const auto& [outcome, n] : r.counters.runs)
             if (n > 0) {
                 f.sample(out, name, {}, {",outcome=\"", outcome, "\""});
                 value(out, n);
             }
     }},
    {"redlock_last_success_timestamp_seconds", "gauge",
     "When the last run that ran PROGRAM and exited 0 ended (servers' clock); 0: never.",
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis) {
         if (!r.counters.empty()) {
             f.sample(out, name);
             seconds_value(out, r.counters.last_success_ms.value_or(0));
         }
     }},
    {"redlock_last_run_timestamp_seconds", "gauge",
     "When the last run that ran PROGRAM ended, whatever its outcome (servers' clock).",
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis) {
         if (r.counters.last_run_ms) {
             f.sample(out, name);
             seconds_value(out, *r.counters.last_run_ms);
         }
     }},
    {"redlock_run_duration_seconds", "histogram",
     "How long the runs that ran PROGRAM held the lock.",
     // (None yet: no histogram, rather than sixteen zeros.)
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis) {
         const auto& c = r.counters;
         if (std::ranges::all_of(c.durations, [](long long n) { return n == 0; }))
             return;
         long long total = 0;
         for (size_t i = 0; i < k_bounds.size(); ++i) {
             total = util::add_counts(total, c.durations[i]);
             f.sample(out, name, "_bucket", {",", k_bounds[i]});
             value(out, total);
         }
         if (c.duration_sum_ms) { // (unknown: not served)
             f.sample(out, name, "_sum");
             seconds_value(out, *c.duration_sum_ms);
         }
         f.sample(out, name, "_count");
         value(out, total);
     }},
    {"redlock_slot_seconds", "gauge", "The slot of a --once-per name (at most one run per slot).",
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis) {
         if (auto slot = slot_of(r)) {
             f.sample(out, name);
             seconds_value(out, *slot);
         }
     }},
    {"redlock_overdue", "gauge",
     "Whether a --once-per name had no success within its slot and a tenth of it (at most an "
     "hour) more (1), on the exporter's clock.",
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis now) {
         if (auto slot = slot_of(r)) {
             f.sample(out, name);
             value(out, overdue(slot, r.counters.last_success_ms, now) ? 1 : 0);
         }
     }},
    // `redlock cron` jobs: a sample only for a name whose record holds a cron slot's.
    {"redlock_cron_next_fire_timestamp_seconds", "gauge",
     "When a redlock cron job fires next, as the claim of its latest slot saw it.",
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis) {
         if (const auto& cron = r.view.cron; cron && cron->next_ms) {
             f.sample(out, name);
             seconds_value(out, *cron->next_ms);
         }
     }},
    {"redlock_cron_slot_timestamp_seconds", "gauge",
     "The latest slot of a redlock cron job that a host ran or recorded missed.",
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis) {
         if (const auto& cron = r.view.cron) {
             f.sample(out, name);
             seconds_value(out, cron->slot_ms);
         }
     }},
    {"redlock_cron_info", "gauge",
     "A redlock cron job's schedule and zone, as its latest slot's claim saw them.",
     [](const Family& f, std::string& out, const std::string& name, const LockRecord& r,
        util::UtcMillis) {
         if (const auto& cron = r.view.cron) {
             f.sample(out, name, {},
                      {",schedule=\"", monitor::escape_label_value(cron->schedule), "\",zone=\"",
                       monitor::escape_label_value(cron->zone), "\""});
             value(out, 1);
         }
     }},
}};

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
    out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ");
    out.append(name).append(" ").append(type).append("\n");
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
    return r.counters.slot_ms ? r.counters.slot_ms : r.view.slot_ms;
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

MetricsWriter::MetricsWriter(const Fleet& fleet, util::UtcMillis now) : m_fleet(fleet), m_now(now) {
    take_order();
}

void MetricsWriter::take_order() {
    m_order.clear();
    m_order.reserve(m_fleet.locks().size());
    for (const auto& item : m_fleet.locks())
        m_order.push_back(&item);
    m_erasures = m_fleet.erasures();
}

bool MetricsWriter::next(std::string& out, size_t want) {
    if (m_family == 0) {
        header(out, "redlock_server_up", "gauge",
               "Whether the server answered the exporter's last reading (1) or not (0).");
        for (const auto& s : m_fleet.servers()) {
            out.append("redlock_server_up{server=\"")
                .append(monitor::escape_label_value(s.name))
                .append("\"} ");
            value(out, s.up ? 1 : 0);
        }
        m_family = 1;
    }
    if (m_fleet.erasures() != m_erasures) {
        // Names went since the last piece (their entries with them): the order is taken
        // again, and the family resumed after the last name written.
        take_order();
        if (m_headed) {
            const auto after = std::ranges::upper_bound(
                m_order, m_last, {},
                [](const Item* item) -> const std::string& { return item->first; });
            m_next = static_cast<size_t>(after - m_order.begin());
        }
    }
    for (; m_family <= k_families.size(); ++m_family, m_next = 0, m_headed = false) {
        const Family& f = k_families[m_family - 1];
        if (!std::exchange(m_headed, true))
            header(out, f.name, f.type, f.help);
        while (m_next < m_order.size()) {
            const Item& item = *m_order[m_next++];
            f.write(f, out, item.first, item.second.record, m_now);
            if (out.size() >= want && (m_next < m_order.size() || m_family < k_families.size())) {
                m_last = item.first;
                return true;
            }
        }
    }
    return false;
}

std::string render_metrics(const Fleet& fleet, util::UtcMillis now) {
    MetricsWriter writer(fleet, now);
    std::string out;
    while (writer.next(out, std::string::npos)) {
    }
    return out;
}

} // namespace redlock::fleet
