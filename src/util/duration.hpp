#pragma once
// Durations as users write them: "250ms", "30s", "5m", "2h", or a bare number of seconds
// (fractions allowed). Parsed at the edges only; inside, everything is std::chrono.

#include <chrono>
#include <string>
#include <string_view>

#include "util/error.hpp"

namespace redlock::util {

using Millis = std::chrono::milliseconds;

// Parses a duration; a negative, empty, malformed or absurdly large value is a usage error
// whose message quotes the input. The result is rounded to whole milliseconds.
[[nodiscard]] Expected<Millis> parse_duration(std::string_view text);

// Parses a duration given in seconds as a number (from a TOML integer or float).
[[nodiscard]] Expected<Millis> duration_from_seconds(double seconds);

// "1.5s", "250ms", "2m": for messages.
[[nodiscard]] std::string format_duration(Millis d);

// "24.3s", "5m 3s", "2h 10m", "1d 2h": a duration for people, rounded down; "-" when negative.
[[nodiscard]] std::string human_duration(Millis d);

} // namespace redlock::util
