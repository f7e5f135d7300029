#include "util/duration.hpp"

#include <array>
#include <charconv>
#include <cmath>

#include "util/format.hpp"

namespace redlock::util {

namespace {

// A year is far beyond any sensible lease or wait; anything longer is almost certainly a
// typo (a missing unit on a millisecond count, say), and the cap keeps every later
// arithmetic on durations far from overflow.
constexpr double k_max_ms = 365.0 * 24 * 3600 * 1000;

std::unexpected<Error> malformed(std::string_view text) {
    return fail(ErrorKind::usage, format("invalid duration '{}': expected a number with an "
                                         "optional unit ms, s, m, h or d (e.g. 250ms, 30s, 5m)",
                                         text));
}

std::unexpected<Error> too_long(std::string_view shown) {
    return fail(ErrorKind::usage,
                format("invalid duration {}: must be at most a year (8760h)", shown));
}

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

// Shortest text that reads back as the same double: "1.5", "-2", "inf", "1e+20".
std::string shortest(double value) {
    std::array<char, 64> buffer{};
    // Plain digits for numbers a config could hold as an integer, exponents beyond that.
    const auto style =
        std::abs(value) < 1e15 ? std::chars_format::fixed : std::chars_format::general;
    auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value, style);
    return ec == std::errc{} ? std::string(buffer.data(), end) : std::string("?");
}

} // namespace

Expected<Millis> parse_duration(std::string_view text) {
    // The number is scanned by hand before from_chars sees it, so that signs, exponents,
    // "inf", "nan" and hex floats, which from_chars would take, are all refused.
    size_t i = 0;
    while (i < text.size() && is_digit(text[i]))
        ++i;
    if (i == 0)
        return malformed(text);
    if (i < text.size() && text[i] == '.') {
        const size_t fraction = ++i;
        while (i < text.size() && is_digit(text[i]))
            ++i;
        if (i == fraction)
            return malformed(text);
    }
    const std::string_view number = text.substr(0, i);
    const std::string_view unit = text.substr(i);

    double scale = 0;
    if (unit.empty() || unit == "s")
        scale = 1000;
    else if (unit == "ms")
        scale = 1;
    else if (unit == "m")
        scale = 60.0 * 1000;
    else if (unit == "h")
        scale = 3600.0 * 1000;
    else if (unit == "d") // --once-per 1d
        scale = 86400.0 * 1000;
    else
        return malformed(text);

    double value = 0;
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value,
                                     std::chars_format::fixed);
    if (ec == std::errc::result_out_of_range)
        return too_long(format("'{}'", text));
    if (ec != std::errc{} || end != number.data() + number.size())
        return malformed(text);

    const double ms = value * scale;
    if (ms > k_max_ms)
        return too_long(format("'{}'", text));
    return Millis{std::llround(ms)};
}

Expected<Millis> duration_from_seconds(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0)
        return fail(ErrorKind::usage,
                    format("invalid duration {}: expected a non-negative number of seconds",
                           shortest(seconds)));
    const double ms = seconds * 1000;
    if (ms > k_max_ms)
        return too_long(shortest(seconds));
    return Millis{std::llround(ms)};
}

std::string format_duration(Millis d) {
    auto ms = d.count();
    std::string out = ms < 0 ? "-" : "";
    if (ms < 0)
        ms = -ms;
    if (ms == 0)
        return "0s";
    if (ms % 86'400'000 == 0)
        return out + std::to_string(ms / 86'400'000) + "d";
    if (ms % 3'600'000 == 0)
        return out + std::to_string(ms / 3'600'000) + "h";
    if (ms % 60'000 == 0)
        return out + std::to_string(ms / 60'000) + "m";
    if (ms < 1000)
        return out + std::to_string(ms) + "ms";
    // Seconds with only the decimals that matter: 1500 -> "1.5s", 1001 -> "1.001s".
    out += std::to_string(ms / 1000);
    if (auto fraction = ms % 1000; fraction != 0) {
        std::string digits = std::to_string(fraction + 1000).substr(1); // zero-padded to 3
        while (digits.back() == '0')
            digits.pop_back();
        out += "." + digits;
    }
    return out + "s";
}

} // namespace redlock::util
