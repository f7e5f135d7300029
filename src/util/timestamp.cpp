#include "util/timestamp.hpp"

#include <cstdio>

namespace redlock::util {

namespace {

// Reads exactly `digits` decimal digits at text[pos], advancing pos.
std::optional<int> take_number(std::string_view text, size_t& pos, size_t digits) {
    if (text.size() - pos < digits)
        return std::nullopt;
    int value = 0;
    for (size_t i = 0; i < digits; ++i) {
        const char c = text[pos + i];
        if (c < '0' || c > '9')
            return std::nullopt;
        value = value * 10 + (c - '0');
    }
    pos += digits;
    return value;
}

bool take_char(std::string_view text, size_t& pos, char expected) {
    if (pos >= text.size() || text[pos] != expected)
        return false;
    ++pos;
    return true;
}

} // namespace

std::optional<UtcMillis> parse_utc_timestamp(std::string_view text) {
    using namespace std::chrono;
    size_t pos = 0;
    const auto year = take_number(text, pos, 4);
    if (!year || !take_char(text, pos, '-'))
        return std::nullopt;
    const auto month = take_number(text, pos, 2);
    if (!month || !take_char(text, pos, '-'))
        return std::nullopt;
    const auto day = take_number(text, pos, 2);
    if (!day || !take_char(text, pos, 'T'))
        return std::nullopt;
    const auto hour = take_number(text, pos, 2);
    if (!hour || !take_char(text, pos, ':'))
        return std::nullopt;
    const auto minute = take_number(text, pos, 2);
    if (!minute || !take_char(text, pos, ':'))
        return std::nullopt;
    const auto second = take_number(text, pos, 2);
    if (!second)
        return std::nullopt;
    int millis = 0;
    if (take_char(text, pos, '.')) {
        size_t digits = 0;
        for (; pos < text.size() && text[pos] >= '0' && text[pos] <= '9'; ++pos, ++digits)
            if (digits < 3)
                millis = millis * 10 + (text[pos] - '0');
        if (digits == 0 || digits > 9)
            return std::nullopt;
        for (; digits < 3; ++digits)
            millis *= 10;
    }
    if (!take_char(text, pos, 'Z') || pos != text.size())
        return std::nullopt;

    const year_month_day date{std::chrono::year{*year},
                              std::chrono::month{static_cast<unsigned>(*month)},
                              std::chrono::day{static_cast<unsigned>(*day)}};
    if (!date.ok() || *hour > 23 || *minute > 59 || *second > 60)
        return std::nullopt;
    return UtcMillis{sys_days{date}} + hours{*hour} + minutes{*minute} + seconds{*second} +
           milliseconds{millis};
}

std::string format_utc_timestamp(UtcMillis time) {
    // Calendar arithmetic from <chrono>: gmtime_r would read /etc/localtime first.
    using namespace std::chrono;
    auto day = floor<days>(time);
    year_month_day ymd{day};
    hh_mm_ss clock{time - day};
    const int year = static_cast<int>(ymd.year());
    if (year < 0 || year > 9999) { // not a time redlock writes; printf's width rules
        char buf[64];
        std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02ld:%02ld:%02ld.%03ldZ", year,
                      static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                      static_cast<long>(clock.hours().count()),
                      static_cast<long>(clock.minutes().count()),
                      static_cast<long>(clock.seconds().count()),
                      static_cast<long>(clock.subseconds().count()));
        return buf;
    }
    // Digit by digit rather than snprintf: every run writes one (the holder's acquired_at).
    std::string out = "0000-00-00T00:00:00.000Z";
    auto put = [&out](size_t end, long value, size_t digits) {
        for (size_t i = 0; i < digits; ++i, value /= 10)
            out[end - i] = static_cast<char>('0' + value % 10);
    };
    put(3, year, 4);
    put(6, static_cast<unsigned>(ymd.month()), 2);
    put(9, static_cast<unsigned>(ymd.day()), 2);
    put(12, clock.hours().count(), 2);
    put(15, clock.minutes().count(), 2);
    put(18, clock.seconds().count(), 2);
    put(22, clock.subseconds().count(), 3);
    return out;
}

} // namespace redlock::util
