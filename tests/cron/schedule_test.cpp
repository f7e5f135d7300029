#include <initializer_list>

#include <doctest/doctest.h>

#include "cron/schedule.hpp"

using redlock::cron::LineError;
using redlock::cron::matches_day;
using redlock::cron::parse_schedule;
using redlock::cron::ParsedSchedule;
using redlock::cron::Schedule;

namespace {

ParsedSchedule parsed(std::string_view line) {
    auto result = parse_schedule(line);
    INFO(line);
    REQUIRE_MESSAGE(result, (result ? "" : result.error().message));
    return *result;
}

Schedule schedule(std::string_view line) {
    return parsed(line).schedule;
}

LineError error_of(std::string_view line) {
    auto result = parse_schedule(line);
    INFO(line);
    REQUIRE_FALSE(result);
    return result.error();
}

template <size_t N>
std::bitset<N> bits(std::initializer_list<size_t> set) {
    std::bitset<N> out;
    for (size_t i : set)
        out.set(i);
    return out;
}

template <size_t N>
std::bitset<N> range(size_t first, size_t last, size_t step = 1) {
    std::bitset<N> out;
    for (size_t i = first; i <= last; i += step)
        out.set(i);
    return out;
}

} // namespace

TEST_CASE("five fields are minute, hour, day of month, month and day of week") {
    auto p = parsed("30 2 * * 1-5   /usr/local/bin/backup --all");
    CHECK(p.schedule.seconds == bits<60>({0}));
    CHECK(p.schedule.minutes == bits<60>({30}));
    CHECK(p.schedule.hours == bits<24>({2}));
    CHECK(p.schedule.days == range<32>(1, 31));
    CHECK(p.schedule.months == range<13>(1, 12));
    CHECK(p.schedule.weekdays == range<7>(1, 5));
    CHECK(p.schedule.every.count() == 0);
    CHECK(p.text == "30 2 * * 1-5");
    CHECK(p.command_start == 15);
}

TEST_CASE("six fields put the seconds first, and seven add supercronic's '*' year last") {
    auto six = parsed("*/15 0 12 * * *\techo noon");
    CHECK(six.schedule.seconds == bits<60>({0, 15, 30, 45}));
    CHECK(six.schedule.minutes == bits<60>({0}));
    CHECK(six.schedule.hours == bits<24>({12}));
    CHECK(six.text == "*/15 0 12 * * *");
    CHECK(six.command_start == 16);
    auto seven = parsed("*/2 * * * * * * ls 2>/dev/null");
    CHECK(seven.schedule.seconds == range<60>(0, 58, 2));
    CHECK(seven.schedule.minutes == range<60>(0, 59));
    CHECK(seven.text == "*/2 * * * * * *");
    CHECK(std::string_view("*/2 * * * * * * ls 2>/dev/null").substr(seven.command_start) ==
          "ls 2>/dev/null");
}

TEST_CASE("months and days of the week have names, in any case") {
    auto s = schedule("0 0 * JAN-mar,Dec mon,WED,Fri x");
    CHECK(s.months == bits<13>({1, 2, 3, 12}));
    CHECK(s.weekdays == bits<7>({1, 3, 5}));
    CHECK(schedule("0 0 * * sun-sat x").weekdays == range<7>(0, 6));
}

TEST_CASE("0 and 7 are both Sunday, and fri-sun runs to Sunday") {
    CHECK(schedule("0 0 * * 7 x").weekdays == bits<7>({0}));
    CHECK(schedule("0 0 * * 0 x").weekdays == bits<7>({0}));
    CHECK(schedule("0 0 * * 5-7 x").weekdays == bits<7>({5, 6, 0}));
    CHECK(schedule("0 0 * * fri-sun x").weekdays == bits<7>({5, 6, 0}));
    CHECK(schedule("0 0 * * 5-0 x").weekdays == bits<7>({5, 6, 0}));
    CHECK(schedule("0 0 * * 0-7 x").weekdays == range<7>(0, 6));
}

TEST_CASE("lists, ranges and steps select what cron(5) says") {
    CHECK(schedule("1-30/7 * * * * x").minutes == bits<60>({1, 8, 15, 22, 29}));
    CHECK(schedule("*/5 * * * * x").minutes == range<60>(0, 55, 5));
    CHECK(schedule("*/35 * * * * x").minutes == bits<60>({0, 35}));
    CHECK(schedule("1,5,10-12 * * * * x").minutes == bits<60>({1, 5, 10, 11, 12}));
    CHECK(schedule("0 */6 * * * x").hours == bits<24>({0, 6, 12, 18}));
    CHECK(schedule("0 0 */10 * * x").days == bits<32>({1, 11, 21, 31}));
    CHECK(schedule("0 0 1 */4 * x").months == bits<13>({1, 5, 9}));
    CHECK(schedule("0 0 * * */2 x").weekdays == bits<7>({0, 2, 4, 6}));
    // "N/S" is N-max/S, as supercronic and croniter read it (cronie refuses it).
    CHECK(schedule("5/15 * * * * x").minutes == bits<60>({5, 20, 35, 50}));
    CHECK(schedule("0 0 * * 1/2 x").weekdays == bits<7>({1, 3, 5, 0}));
    CHECK(schedule("0 0 * * 3-3 x").weekdays == bits<7>({3}));
    CHECK(schedule("05 007 * * * x").minutes == bits<60>({5}));
}

TEST_CASE("the shorthands are their five fields") {
    for (auto [shorthand, fields] : {std::pair{"@yearly", "0 0 1 1 *"},
                                     {"@annually", "0 0 1 1 *"},
                                     {"@monthly", "0 0 1 * *"},
                                     {"@weekly", "0 0 * * 0"},
                                     {"@daily", "0 0 * * *"},
                                     {"@midnight", "0 0 * * *"},
                                     {"@hourly", "0 * * * *"},
                                     {"@DAILY", "0 0 * * *"}}) {
        INFO(shorthand);
        auto p = parsed(std::string(shorthand) + "  run it");
        CHECK(p.schedule == schedule(std::string(fields) + " x"));
        std::string lower(shorthand);
        for (char& c : lower)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        CHECK(p.text == lower);
        CHECK(p.command_start == std::string_view(shorthand).size() + 2);
    }
}

TEST_CASE("@every takes a whole number of seconds, counted from the epoch") {
    auto p = parsed("@every 90s sync");
    CHECK(p.schedule.every == std::chrono::seconds(90));
    CHECK(p.text == "@every 90s");
    CHECK(p.command_start == 11);
    CHECK(schedule("@every 2h x").every == std::chrono::hours(2));
    CHECK(schedule("@every 1d x").every == std::chrono::hours(24));
}

TEST_CASE("a fixed time is one whose minute and hour fields do not start with '*'") {
    CHECK(schedule("30 2 * * * x").fixed_time);
    CHECK(schedule("0,30 1-3 * * * x").fixed_time);
    CHECK(schedule("*/10 30 2 * * * x").fixed_time); // the seconds do not count
    CHECK(schedule("@daily x").fixed_time);
    CHECK(schedule("@weekly x").fixed_time);
    CHECK_FALSE(schedule("*/5 2 * * * x").fixed_time);
    CHECK_FALSE(schedule("30 * * * * x").fixed_time);
    CHECK_FALSE(schedule("30 */2 * * * x").fixed_time);
    CHECK_FALSE(schedule("@hourly x").fixed_time);
}

TEST_CASE("both day fields restricted match either day, and a '*' in either makes both needed") {
    CHECK(schedule("0 0 13 * fri x").days_or_weekdays);
    CHECK_FALSE(schedule("0 0 * * fri x").days_or_weekdays);
    CHECK_FALSE(schedule("0 0 13 * * x").days_or_weekdays);
    CHECK_FALSE(schedule("0 0 */2 * fri x").days_or_weekdays);
    CHECK_FALSE(schedule("0 0 13 * */2 x").days_or_weekdays);
    // 2026-02-13 is a Friday, 2026-02-06 a Friday, 2026-03-13 a Friday too, 2026-01-13 a Tuesday.
    using namespace std::chrono;
    const auto either = schedule("0 0 13 * fri x");
    CHECK(matches_day(either, 2026y / January / 13));
    CHECK(matches_day(either, 2026y / February / 6));
    CHECK_FALSE(matches_day(either, 2026y / February / 7));
    const auto both = schedule("0 0 */2 * fri x");
    CHECK(matches_day(both, 2026y / February / 13));
    CHECK_FALSE(matches_day(both, 2026y / February / 6));
    CHECK_FALSE(matches_day(both, 2026y / February / 15));
    CHECK_FALSE(matches_day(schedule("0 0 * 3 * x"), 2026y / February / 13));
}

TEST_CASE("a bad field is refused with its name, where it is, and why") {
    struct Case {
        const char* line;
        size_t offset;
        const char* message;
    };
    for (const Case& c : std::initializer_list<Case>{
             {"61 * * * * x", 0, "minute: 61 is out of range 0-59"},
             {"* 24 * * * x", 2, "hour: 24 is out of range 0-23"},
             {"* * 0 * * x", 4, "day-of-month: 0 is out of range 1-31"},
             {"* * 32 * * x", 4, "day-of-month: 32 is out of range 1-31"},
             {"* * * 13 * x", 6, "month: 13 is out of range 1-12"},
             {"* * * 0 * x", 6, "month: 0 is out of range 1-12"},
             {"* * * * 8 x", 8, "day-of-week: 8 is out of range 0-7"},
             {"60 * * * * * x", 0, "second: 60 is out of range 0-59"},
             {"1-99999999999 * * * * x", 2, "minute: 99999999999 is out of range 0-59"},
             {"* * * mon * x", 6, "month: unknown name 'mon' (jan-dec or 1-12)"},
             {"* * * * jan x", 8, "day-of-week: unknown name 'jan' (sun-sat or 0-7)"},
             {"* mon * * * x", 2, "hour: 'mon' is not a number"},
             {"1,,2 * * * * x", 2, "minute: empty item in the list '1,,2'"},
             {",1 * * * * x", 0, "minute: empty item in the list ',1'"},
             {"* * 1, * * x", 6, "day-of-month: empty item in the list '1,'"},
             {"*/0 * * * * x", 2, "minute: the step in '*/0' must be at least 1"},
             {"*/10000 * * * * x", 2, "minute: the step in '*/10000' is too large"},
             {"*/ * * * * x", 1, "minute: '*/' needs a number of steps after '/'"},
             {"5//2 * * * * x", 1, "minute: '5//2' needs a number of steps after '/'"},
             {"5-1 * * * * x", 0, "minute: the range '5-1' goes backwards"},
             {"* * * * sat-mon x", 8, "day-of-week: the range 'sat-mon' goes backwards"},
             {"1- * * * * x", 1, "minute: the range '1-' has no end"},
             {"-5 * * * * x", 0, "minute: unexpected '-' in '-5'"},
             {"1-2-3 * * * * x", 3, "minute: unexpected '-' in '1-2-3'"},
             {"1/2/3 * * * * x", 3, "minute: unexpected '/' in '1/2/3'"},
             {"** * * * * x", 1, "minute: unexpected '*' in '**'"},
             {"0 0 ? * * x", 4,
              "day-of-month: '?' is not supported (Quartz syntax: cron(5) has no ?, L, W or #)"},
             {"0 0 * * 5#3 x", 9,
              "day-of-week: '#' is not supported (Quartz syntax: cron(5) has no ?, L, W or #)"},
             {"0 0 L * * x", 4,
              "day-of-month: 'L' is not a number (Quartz syntax: cron(5) has no ?, L, W or #)"},
             {"0 0 30 2 * x", 4, "day-of-month: never fires: no month given has these days"},
             {"0 0 31 4,6,9,11 * x", 4, "day-of-month: never fires: no month given has these days"},
             {"0 0 31 feb */2 x", 4, "day-of-month: never fires: no month given has these days"},
         }) {
        INFO(c.line);
        CHECK(error_of(c.line) == LineError{c.offset, c.message});
    }
}

TEST_CASE("a line must have 5 to 7 time fields and a command") {
    CHECK(error_of("0 2 * * /bin/backup") ==
          LineError{8, "expected 5 time fields (or 6, seconds first) before the command; "
                       "'/bin/backup' is not a time field"});
    CHECK(error_of("0 2 * *") ==
          LineError{7, "expected 5 time fields (or 6, seconds first) before the command; the "
                       "line ends after 4 of them"});
    CHECK(error_of("*/5x * * * * x") ==
          LineError{0, "expected 5 time fields (or 6, seconds first) before the command; "
                       "'*/5x' is not a time field"});
    CHECK(error_of("0 2 * * *") == LineError{9, "no command after the time fields"});
    CHECK(error_of("0 2 * * *   ") == LineError{12, "no command after the time fields"});
    CHECK(error_of("0 0 2 * * * 2026 /bin/x") ==
          LineError{12, "year: only '*' is supported, not '2026' (a 7th time field, as "
                        "supercronic writes)"});
}

TEST_CASE("the @ forms are refused when unknown, @reboot, or without a command") {
    CHECK(error_of("@reboot /bin/start") ==
          LineError{0, "@reboot is not supported: a fleet has no reboot of its own (run such a "
                       "command from each host's boot, a systemd unit)"});
    CHECK(error_of("@fortnightly x") ==
          LineError{0, "unknown schedule '@fortnightly' (@yearly, @annually, @monthly, @weekly, "
                       "@daily, @midnight, @hourly or @every DURATION)"});
    CHECK(error_of("@daily") == LineError{6, "no command after the schedule"});
    CHECK(error_of("@daily  ") == LineError{8, "no command after the schedule"});
    CHECK(error_of("@every") == LineError{6, "@every needs a DURATION, then the command"});
    CHECK(error_of("@every 5m") == LineError{9, "no command after the schedule"});
    CHECK(error_of("@every soon x") ==
          LineError{7, "@every: invalid duration 'soon': expected a number with an optional unit "
                       "ms, s, m, h or d (e.g. 250ms, 30s, 5m)"});
    CHECK(error_of("@every 1.5s x") ==
          LineError{7, "@every: 1.5s is not a whole number of seconds (at least 1s)"});
    CHECK(error_of("@every 0 x") ==
          LineError{7, "@every: 0 is not a whole number of seconds (at least 1s)"});
}
