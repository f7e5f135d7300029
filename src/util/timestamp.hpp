#pragma once
// ISO 8601 UTC timestamps as redlock writes them in holder metadata
// ("2026-12-02T14:16:33.620Z"), read back without trusting them: the text may come from
// another client or be garbage.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace redlock::util {

using UtcMillis = std::chrono::sys_time<std::chrono::milliseconds>;

// "YYYY-MM-DDTHH:MM:SS[.fraction]Z" with a date that exists, hours 0-23, minutes 0-59 and
// seconds 0-60 (a leap second); the fraction has 1-9 digits, of which milliseconds are
// kept. nullopt for anything else. Never overflows: years are 0000-9999.
[[nodiscard]] std::optional<UtcMillis> parse_utc_timestamp(std::string_view text);

// "YYYY-MM-DDTHH:MM:SS.mmmZ", the form redlock writes.
[[nodiscard]] std::string format_utc_timestamp(UtcMillis time);

// The last millisecond of the year 9999, since the Unix epoch.
inline constexpr long long k_max_unix_ms = 253'402'300'799'999;
// A time (milliseconds since the Unix epoch) or a duration in milliseconds that a server or
// another client wrote, believed only from 0 to k_max_unix_ms: a timestamp in that range
// formats, and a few of them add up, without overflow. nullopt (unknown) otherwise.
[[nodiscard]] constexpr std::optional<long long> plausible_ms(long long ms) {
    if (ms < 0 || ms > k_max_unix_ms)
        return std::nullopt;
    return ms;
}
[[nodiscard]] constexpr std::optional<long long> plausible_ms(std::optional<long long> ms) {
    return ms ? plausible_ms(*ms) : std::nullopt;
}

} // namespace redlock::util
