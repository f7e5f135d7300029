#pragma once
// The fleet as Prometheus metrics (text exposition format 0.0.4, clean for `promtool check
// metrics`): one series set per lock name (label `name`) and one per server, as
// `redlock exporter` serves them on /metrics. redlock(1), EXPORTER, lists them.

#include <string>

#include "fleet/fleet.hpp"
#include "util/timestamp.hpp"

namespace redlock::fleet {

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
