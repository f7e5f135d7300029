#pragma once
// A time zone of the system's tz database ($TZDIR, else /usr/share/zoneinfo), as glibc
// reads it: the UTC offset at an instant, where the offset changes, and which instants a
// civil time of the zone names (one; none when the clocks skip it; two when they repeat it).
//
// glibc reads a zone only through $TZ: while it learns a zone, TZ is set to it and then put
// back as it was, so neither redlock's environment nor a child's keeps it. Each UTC year
// of a zone is learnt once, and its offset changes kept. Not for several threads at once
// (setenv), nor while another thread reads the environment.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "util/error.hpp"

namespace redlock::cron {

using Instant = std::chrono::sys_seconds;     // UTC, to the second
using LocalTime = std::chrono::local_seconds; // a civil time, in some zone

// What a civil time names in a zone.
struct LocalInstants {
    enum class Kind { unique, skipped, repeated };
    Kind kind = Kind::unique;
    // unique: the instant; repeated: the earlier of the two; skipped: the instant the
    // clocks jumped over it (the first instant after the gap).
    Instant first;
    Instant second; // repeated: the later instant; otherwise the same as first
    bool operator==(const LocalInstants&) const = default;
};

class Zone {
  public:
    // UTC, which needs no file.
    Zone();

    // The zone NAME of the tz database ("Europe/Berlin"; a leading ':' as $TZ takes it is
    // dropped). A config error, without a position, for a name that is not one: glibc
    // would silently take it for UTC.
    [[nodiscard]] static util::Expected<Zone> load(std::string_view name);

    [[nodiscard]] const std::string& name() const;
    [[nodiscard]] bool is_utc() const { return m_data == nullptr; }

    [[nodiscard]] std::chrono::seconds offset_at(Instant t) const;
    [[nodiscard]] LocalTime local(Instant t) const {
        return LocalTime{(t + offset_at(t)).time_since_epoch()};
    }
    // The first instant in (from, until] whose offset is not offset_at(from), if any.
    [[nodiscard]] std::optional<Instant> next_change(Instant from, Instant until) const;
    [[nodiscard]] LocalInstants resolve(LocalTime local) const;

    // Zones are equal when they have the same name.
    [[nodiscard]] bool operator==(const Zone& other) const { return name() == other.name(); }

  private:
    struct Data;
    explicit Zone(std::shared_ptr<Data> data) : m_data(std::move(data)) {}
    std::shared_ptr<Data> m_data; // null for UTC; shared by the copies, with what was learnt
};

} // namespace redlock::cron
