#pragma once
// The fleet as Prometheus metrics (text exposition format 0.0.4, clean for `promtool check
// metrics`): one series set per lock name (label `name`) and one per server, as
// `redlock exporter` serves them on /metrics. redlock(1), EXPORTER, lists them.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fleet/fleet.hpp"
#include "util/timestamp.hpp"

namespace redlock::fleet {

// /metrics written a piece at a time, as the client reads it: a fleet of 100,000 names is
// a body of a hundred megabytes, which need not be held whole. Each family's samples come
// in name order, over the names there when the scrape began (a list of the model's entries,
// walked eleven times rather than the tree); what the model changes between two pieces (a
// notice, a sweep's batch) shows in the families still to come, and names that go are
// passed over (the list is taken again, resumed after the last name written).
class MetricsWriter {
  public:
    MetricsWriter(const Fleet& fleet, util::UtcMillis now);
    // Appends samples to `out` until it holds at least `want` bytes (a sample is never cut)
    // or all are written; false once all are.
    bool next(std::string& out, size_t want);

  private:
    using Item = std::map<std::string, Fleet::Entry>::value_type;
    void take_order();

    const Fleet& m_fleet;
    util::UtcMillis m_now;
    std::vector<const Item*> m_order; // the names, in order
    size_t m_erasures = 0;            // the model's when m_order was taken
    size_t m_family = 0;              // 0: the servers'; then the names' families, from 1
    bool m_headed = false;            // the current family's HELP and TYPE written
    size_t m_next = 0;                // in m_order, of the current family
    std::string m_last;               // the last name written
};

// All of it at once.
[[nodiscard]] std::string render_metrics(const Fleet& fleet, util::UtcMillis now);

// Whether a --once-per name (`slot_ms`) is overdue: no success within its slot and a tenth
// of it more (at most an hour more), on the exporter's clock; or none ever, though it ran
// (`last_success_ms` nullopt). The alert rules shipped say the same.
[[nodiscard]] bool overdue(std::optional<long long> slot_ms,
                           std::optional<long long> last_success_ms, util::UtcMillis now);

// How long the holder of a held lock has held it, from its metadata's acquired_at; nullopt
// without a holder, or when acquired_at is no time (not one, or before 1970).
[[nodiscard]] std::optional<long long> held_ms(const LockRecord& record, util::UtcMillis now);

// A --once-per name's slot: from its counters, else from its slot record.
[[nodiscard]] std::optional<long long> slot_of(const LockRecord& record);

} // namespace redlock::fleet
