#pragma once
// redlock's own messages on stderr, as "redlock: text". stdout belongs to PROGRAM.
// Errors always print; notes are silenced by -q; verbose lines need -v.

#include <format>
#include <string>
#include <string_view>

namespace redlock::util::log {

enum class Level { quiet, normal, verbose };

void set_level(Level level);
[[nodiscard]] Level level();
[[nodiscard]] inline bool verbose_enabled() { return level() == Level::verbose; }

void write(std::string_view text); // one line, prefixed, written with a single write(2)

template <typename... Args>
void error(std::format_string<Args...> fmt, Args&&... args) {
    write(std::format(fmt, std::forward<Args>(args)...));
}
template <typename... Args>
void note(std::format_string<Args...> fmt, Args&&... args) {
    if (level() != Level::quiet)
        write(std::format(fmt, std::forward<Args>(args)...));
}
template <typename... Args>
void verbose(std::format_string<Args...> fmt, Args&&... args) {
    if (verbose_enabled())
        write(std::format(fmt, std::forward<Args>(args)...));
}

} // namespace redlock::util::log
