#include "util/duration.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "util/format.hpp"

namespace redlock::util {

namespace {

// A year is far beyond any sensible lease or wait; anything longer is almost certainly a
// typo (a missing unit on a millisecond count, say), and the cap keeps every later
// arithmetic on durations far from overflow.
constexpr long long k_max_ms = 365LL * 24 * 3600 * 1000;

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

// Shortest text that reads back as the same double: "1.5", "-2", "inf", "1e+20". printf's,
// not to_chars: libstdc++'s floating to_chars is what would link libm into the binary.
std::string shortest(double value) {
    std::array<char, 32> buffer{};
    for (int precision : {15, 16, 17}) {
        std::snprintf(buffer.data(), buffer.size(), "%.*g", precision, value);
        if (precision == 17 || std::strtod(buffer.data(), nullptr) == value)
            break;
    }
    return buffer.data();
}

} // namespace

Expected<Millis> parse_duration(std::string_view text) {
    // Digits, an optional fraction, an optional unit, read by hand in integers: signs,
    // exponents, "inf", "nan" and hex floats are refused, and "0.1" is exactly 100ms (no
    // binary fraction to round, nor libm for the rounding).
    size_t i = 0;
    while (i < text.size() && is_digit(text[i]))
        ++i;
    const std::string_view whole = text.substr(0, i);
    if (whole.empty())
        return malformed(text);
    std::string_view fraction;
    if (i < text.size() && text[i] == '.') {
        const size_t first = ++i;
        while (i < text.size() && is_digit(text[i]))
            ++i;
        fraction = text.substr(first, i - first);
        if (fraction.empty())
            return malformed(text);
    }
    const std::string_view unit = text.substr(i);

    long long scale = 0; // milliseconds per unit
    if (unit.empty() || unit == "s")
        scale = 1000;
    else if (unit == "ms")
        scale = 1;
    else if (unit == "m")
        scale = 60LL * 1000;
    else if (unit == "h")
        scale = 3600LL * 1000;
    else if (unit == "d") // --once-per 1d
        scale = 86400LL * 1000;
    else
        return malformed(text);

    long long units = 0;
    for (char c : whole) {
        units = units * 10 + (c - '0');
        if (units > k_max_ms / scale)
            return too_long(format("'{}'", text));
    }
    // fraction × scale, exactly: the fraction's digits as one integer times the scale,
    // worked from the last digit like long multiplication. What carries past the point is
    // whole milliseconds; the digit last written is the first after the point, which alone
    // decides the rounding (half up). The carry stays below the scale, so any number of
    // digits is exact.
    long long carry = 0;
    long long first_after_point = 0;
    for (auto digit = fraction.rbegin(); digit != fraction.rend(); ++digit) {
        const long long product = (*digit - '0') * scale + carry;
        first_after_point = product % 10;
        carry = product / 10;
    }
    long long ms = units * scale + carry + (first_after_point >= 5 ? 1 : 0);
    if (ms > k_max_ms)
        return too_long(format("'{}'", text));
    return Millis{ms};
}

Expected<Millis> duration_from_seconds(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0)
        return fail(ErrorKind::usage,
                    format("invalid duration {}: expected a non-negative number of seconds",
                           shortest(seconds)));
    const double ms = seconds * 1000;
    if (ms > static_cast<double>(k_max_ms))
        return too_long(shortest(seconds));
    // Rounded half up by hand (llround is libm's, which nothing else needs): below 2^53
    // the part after the point is exact.
    auto whole = static_cast<long long>(ms);
    if (ms - static_cast<double>(whole) >= 0.5)
        ++whole;
    return Millis{whole};
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

std::string human_duration(Millis d) {
    auto ms = d.count();
    if (ms < 0)
        return "-";
    if (ms < 60'000)
        return format("{:.1f}s", static_cast<double>(ms) / 1000.0);
    long long s = ms / 1000;
    if (s < 3600)
        return format("{}m {}s", s / 60, s % 60);
    if (s < 86400)
        return format("{}h {}m", s / 3600, (s % 3600) / 60);
    return format("{}d {}h", s / 86400, (s % 86400) / 3600);
}

} // namespace redlock::util
