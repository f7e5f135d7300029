#pragma once
// util::format is {fmt}'s format (libfmt-dev), used header-only so that no shared library
// is loaded at start-up: "{}" placeholders with std::format's specs ("{:.1f}", "{:02x}",
// "{:<20}"), each format string checked against its arguments at compile time. A format
// chosen at run time goes through fmt::runtime().

#include <fmt/format.h>
#include <string>
#include <utility>

namespace redlock::util {

template <typename... Args>
[[nodiscard]] std::string format(fmt::format_string<Args...> fmt, Args&&... args) {
    return fmt::format(fmt, std::forward<Args>(args)...);
}

} // namespace redlock::util
