#include "cron/fire.hpp"

#include <cstdlib>

#include "util/format.hpp"

namespace redlock::cron {

namespace {

using namespace std::chrono;

// A Gregorian cycle: every day's weekday, every February 29 and every century rule comes
// back after it, so a schedule that has not matched within it never will.
constexpr days k_horizon{146097 + 1};

// The first time of day at or after `from` made of the schedule's hours, minutes and
// seconds; nullopt when the day has none left.
std::optional<seconds> first_time_from(const Schedule& s, seconds from) {
    const hh_mm_ss<seconds> start(from);
    const auto h0 = static_cast<size_t>(start.hours().count());
    const auto m0 = static_cast<size_t>(start.minutes().count());
    const auto s0 = static_cast<size_t>(start.seconds().count());
    for (size_t h = h0; h < 24; ++h) {
        if (!s.hours[h])
            continue;
        for (size_t m = h == h0 ? m0 : 0; m < 60; ++m) {
            if (!s.minutes[m])
                continue;
            for (size_t sec = h == h0 && m == m0 ? s0 : 0; sec < 60; ++sec)
                if (s.seconds[sec])
                    return hours(h) + minutes(m) + seconds(sec);
        }
    }
    return std::nullopt;
}

// A fixed time follows the ISC rule: each civil time it names fires at its first
// instant, or, skipped, when the clocks jump over it. That instant never decreases as
// the civil time grows, so the first match whose instant is after `after` is the fire;
// the matches of a gap all give its jump, and the next search starts after the gap.
std::optional<Instant> next_fixed_fire(const Schedule& s, const Zone& zone, Instant after) {
    LocalTime searched = zone.local(after);
    while (auto match = next_match(s, searched + 1s)) {
        const Instant fire = zone.resolve(*match).first;
        if (fire > after)
            return fire;
        searched = *match; // the first occurrence passed: `after` is in a repeat
    }
    return std::nullopt;
}

// Any other time follows the clock: within a stretch of constant offset, civil time is
// UTC plus the offset, so the next match there is the fire, unless the offset changes
// first, and then the search goes on from the change.
std::optional<Instant> next_clock_fire(const Schedule& s, const Zone& zone, Instant after) {
    Instant from = after + 1s;
    while (true) {
        const seconds offset = zone.offset_at(from);
        const auto match = next_match(s, LocalTime{(from + offset).time_since_epoch()});
        if (!match)
            return std::nullopt;
        const Instant fire{match->time_since_epoch() - offset};
        const auto change = zone.next_change(from, fire);
        if (!change)
            return fire;
        from = *change;
    }
}

} // namespace

std::optional<LocalTime> next_match(const Schedule& s, LocalTime from) {
    local_days day = floor<days>(from);
    seconds time_of_day = from - day;
    for (const local_days end = day + k_horizon; day < end; day += days(1), time_of_day = 0s) {
        const year_month_day date(day);
        if (!s.months[static_cast<unsigned>(date.month())]) {
            // To the 1st of the next month (the loop's += 1 day, from its last day).
            day = local_days(date.year() / date.month() / last);
            continue;
        }
        if (!matches_day(s, date))
            continue;
        if (auto time = first_time_from(s, time_of_day))
            return day + *time;
    }
    return std::nullopt;
}

std::optional<Instant> next_fire(const Schedule& s, const Zone& zone, Instant after) {
    if (s.every > 0s)
        return Instant{(after.time_since_epoch() / s.every + 1) * s.every};
    return s.fixed_time ? next_fixed_fire(s, zone, after) : next_clock_fire(s, zone, after);
}

std::vector<Instant> fires_between(const Schedule& s, const Zone& zone, Instant after,
                                   Instant until, size_t limit) {
    std::vector<Instant> out;
    for (auto fire = next_fire(s, zone, after); fire && *fire <= until && out.size() < limit;
         fire = next_fire(s, zone, *fire))
        out.push_back(*fire);
    return out;
}

std::string slot_text(Instant at) {
    const auto day = floor<days>(at);
    const year_month_day date(day);
    const hh_mm_ss<seconds> time(at - day);
    return util::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", static_cast<int>(date.year()),
                        static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()),
                        time.hours().count(), time.minutes().count(), time.seconds().count());
}

std::string local_text(const Zone& zone, Instant at) {
    const seconds offset = zone.offset_at(at);
    std::string text = slot_text(Instant{zone.local(at).time_since_epoch()});
    text.pop_back(); // the 'Z'
    const auto minutes = std::abs(offset.count()) / 60;
    return text +
           util::format("{}{:02}:{:02}", offset < 0s ? '-' : '+', minutes / 60, minutes % 60);
}

} // namespace redlock::cron
