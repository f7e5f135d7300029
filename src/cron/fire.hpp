#pragma once
// When a schedule fires in a zone: each fire is a UTC instant, to the second, and a slot
// is a job's identity with one of its fires.
//
// Daylight saving follows the ISC cron rule (cron(8)). A fixed-time schedule (minute and
// hour fields without '*') whose time the clocks skip fires at the instant they jump, once
// however many of its times the gap held; a time the clocks repeat fires at its first
// occurrence only. Any other schedule follows the clock as lived: a time that does not
// exist does not fire, a repeated one fires each time it comes. Unlike ISC cron, which
// cannot tell a zone's change from a clock being set, changes of 3 hours or more (a zone
// moving across the date line) follow the same rule. @every ignores zones: its slots are
// counted from the Unix epoch in UTC.

#include <optional>
#include <string>
#include <vector>

#include "cron/schedule.hpp"
#include "cron/zone.hpp"

namespace redlock::cron {

// The first civil time at or after `from` that the schedule's fields match; nullopt when
// none does within 400 years (a whole Gregorian cycle: never).
[[nodiscard]] std::optional<LocalTime> next_match(const Schedule& schedule, LocalTime from);

// The schedule's first fire strictly after `after`; nullopt for none within 400 years.
[[nodiscard]] std::optional<Instant> next_fire(const Schedule& schedule, const Zone& zone,
                                               Instant after);

// The fires in (after, until], in order: at most `limit`, the earliest.
[[nodiscard]] std::vector<Instant> fires_between(const Schedule& schedule, const Zone& zone,
                                                 Instant after, Instant until, size_t limit);

// A slot's instant as REDLOCK_SLOT gives it: ISO 8601 UTC, "2026-03-29T01:00:00Z".
[[nodiscard]] std::string slot_text(Instant at);
// The same instant as `zone` shows it, with its offset: "2026-03-29T03:00:00+02:00".
[[nodiscard]] std::string local_text(const Zone& zone, Instant at);

} // namespace redlock::cron
