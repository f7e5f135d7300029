#pragma once
// redlock's own messages on stderr, as "redlock: text". stdout belongs to PROGRAM.
// Errors always print; notes are silenced by -q; verbose lines need -v.

#include <string>
#include <string_view>
#include <utility>

#include "util/format.hpp"

namespace redlock::util::log {

enum class Level { quiet, normal, verbose };

void set_level(Level level);
[[nodiscard]] Level level();
[[nodiscard]] inline bool verbose_enabled() {
    return level() == Level::verbose;
}

// One line, prefixed, written with a single write(2); control characters and bytes that
// are not UTF-8 are escaped (util::printable), so a message is always exactly one line.
void write(std::string_view text);

// Writes the line only if stderr can take it at once (poll says writable: a pipe with
// room for it, a terminal not stopped by ^S); false when it was not written.
[[nodiscard]] bool write_if_ready(std::string_view text);

template <typename... Args>
void error(fmt::format_string<Args...> fmt, Args&&... args) {
    write(util::format(fmt, std::forward<Args>(args)...));
}
template <typename... Args>
void note(fmt::format_string<Args...> fmt, Args&&... args) {
    if (level() != Level::quiet)
        write(util::format(fmt, std::forward<Args>(args)...));
}
// The arguments are built before the level is looked at: a verbose line whose arguments
// cost something (lock::describe_round) on a path every run takes goes inside
// `if (verbose_enabled())`.
template <typename... Args>
void verbose(fmt::format_string<Args...> fmt, Args&&... args) {
    if (verbose_enabled())
        write(util::format(fmt, std::forward<Args>(args)...));
}

} // namespace redlock::util::log
