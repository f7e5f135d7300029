#pragma once
// A crontab line's schedule, as cron(5) writes it: five time fields (minute, hour, day of
// month, month, day of week), or six with seconds first, or seven with supercronic's '*'
// year last; names (jan-dec, sun-sat), lists, ranges, steps; @yearly ... @hourly and
// @every DURATION. parse_schedule() reads the start of the line and says where the
// command starts; when a schedule fires is fire.hpp's.

#include <bitset>
#include <chrono>
#include <expected>
#include <string>
#include <string_view>

namespace redlock::cron {

struct Schedule {
    std::bitset<60> seconds; // 5 fields: {0}
    std::bitset<60> minutes;
    std::bitset<24> hours;
    std::bitset<32> days;    // 1-31
    std::bitset<13> months;  // 1-12
    std::bitset<7> weekdays; // 0-6, Sunday 0 (7 is read as 0)
    // Both day fields restricted (neither starts with '*'): a day matches when either
    // does, as Vixie cron has it; otherwise when both do.
    bool days_or_weekdays = false;
    // The ISC cron rule's "particular time": neither the minute nor the hour field starts
    // with '*' (nor is it @hourly). Such a job, on a day the clocks skip its time, runs
    // when they jump; on a day they repeat it, once. Other jobs follow the clock as lived.
    bool fixed_time = false;
    // @every: slots of this length counted from the Unix epoch, in UTC (as --once-per);
    // zero for a calendar schedule.
    std::chrono::seconds every{0};
    bool operator==(const Schedule&) const = default;
};

struct ParsedSchedule {
    Schedule schedule;
    std::string text;         // the schedule as written, spaces collapsed: "30 2 * * 1-5"
    size_t command_start = 0; // where the command starts in the line
};

// A problem with a crontab line: where (`offset` into the text read) and what, in
// lowercase, naming the field or setting ("minute: 61 is out of range 0-59").
struct LineError {
    size_t offset = 0;
    std::string message;
    bool operator==(const LineError&) const = default;
};

// The schedule at the start of `line` (no leading blanks), and where its command starts.
// A line without a command, a schedule that can never fire (30 feb), @reboot and a year
// field other than '*' are errors.
[[nodiscard]] std::expected<ParsedSchedule, LineError> parse_schedule(std::string_view line);

// Whether a local calendar day is one of the schedule's days (month and day fields).
[[nodiscard]] bool matches_day(const Schedule& schedule, std::chrono::year_month_day day);

} // namespace redlock::cron
