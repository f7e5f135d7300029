#pragma once
// Which process, beyond its pid: the kernel's boot id and the process's start time, so a
// pid reused after a reboot or after the process ended is never taken for it. A nested
// run uses it to prove that it descends from the run whose lock it would run under.

#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace redlock::process {

// "<boot id>/<start time in clock ticks since boot>" of process `pid`; nullopt when it is
// gone or /proc cannot tell.
[[nodiscard]] std::optional<std::string> identity(pid_t pid);

// Whether process `pid` with identity `id` is an ancestor of this process (its parent,
// or its parent's parent, and so on).
[[nodiscard]] bool is_ancestor(pid_t pid, std::string_view id);

// The start time and parent in a /proc/PID/stat line ("pid (comm) S ppid ... starttime
// ..."); false when the line does not have them.
struct StatFields {
    pid_t ppid = 0;
    unsigned long long start_time = 0;
};
[[nodiscard]] bool parse_stat(std::string_view line, StatFields& out);

} // namespace redlock::process
