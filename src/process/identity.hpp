#pragma once
// Which process, beyond its pid: its start time on this boot, so that a pid reused after a
// reboot or after the process ended is never taken for it. A nested run uses it to prove
// that it descends from the run whose lock it would run under; the metrics file, to tell
// a running run from a dead one. And which machine and boot: a lock held by this machine
// under an earlier boot is held by nobody (`redlock reap`).

#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace redlock::process {

// "<boot id>/<start time in clock ticks since boot>" of process `pid`; nullopt when it is
// gone or /proc cannot tell.
[[nodiscard]] std::optional<std::string> identity(pid_t pid);

// This boot's id (/proc/sys/kernel/random/boot_id, new at every boot), and this machine's
// (/etc/machine-id, kept across boots); "" when unknown. Read once each.
[[nodiscard]] const std::string& boot_id();
[[nodiscard]] const std::string& machine_id();

// Whether process `pid` with identity `id` is an ancestor of this process (its parent,
// or its parent's parent, and so on).
[[nodiscard]] bool is_ancestor(pid_t pid, std::string_view id);

// Whether process `pid` (1 included) is an ancestor of this process and the same process
// that, on this host, said it was running at `boottime_ms` (CLOCK_BOOTTIME, ms) and at `wall_ms`
// (Unix ms): it started by then, so a later process that took its pid is told apart, and `wall_ms`
// falls in this boot. What a lock's holder records costs it one clock read; the check is made only
// by a nested run.
[[nodiscard]] bool is_ancestor_running_at(pid_t pid, long long boottime_ms, long long wall_ms);

// The pid namespace of this process: the inode of /proc/self/ns/pid, the same for two
// processes only if they are in one namespace (pids mean nothing across two); 0 if unknown.
[[nodiscard]] unsigned long long pid_namespace();

// The start time and parent in a /proc/PID/stat line ("pid (comm) S ppid ... starttime
// ..."); false when the line does not have them.
struct StatFields {
    pid_t ppid = 0;
    unsigned long long start_time = 0;
};
[[nodiscard]] bool parse_stat(std::string_view line, StatFields& out);

} // namespace redlock::process
