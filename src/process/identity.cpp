#include "process/identity.hpp"

#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fd.hpp"
#include "util/format.hpp"

namespace redlock::process {

namespace {

// A small /proc file read whole (one read suffices for these).
std::optional<std::string> read_small(const char* path) {
    util::UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
    if (!fd)
        return std::nullopt;
    char buf[1024];
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n <= 0)
        return std::nullopt;
    return std::string(buf, static_cast<size_t>(n));
}

std::optional<StatFields> stat_of(pid_t pid) {
    const std::string path =
        pid == ::getpid() ? "/proc/self/stat" : "/proc/" + std::to_string(pid) + "/stat";
    auto line = read_small(path.c_str());
    StatFields fields;
    if (!line || !parse_stat(*line, fields))
        return std::nullopt;
    return fields;
}

// The first line of a small file, without its line end; "" if it cannot be read.
std::string first_line(const char* path) {
    auto text = read_small(path);
    std::string out = text ? text->substr(0, text->find('\n')) : std::string();
    while (!out.empty() && out.back() == ' ')
        out.pop_back();
    return out;
}

} // namespace

const std::string& boot_id() {
    static const std::string id = first_line("/proc/sys/kernel/random/boot_id");
    return id;
}

const std::string& machine_id() {
    // /etc/machine-id, or D-Bus's copy where a system has only that. An empty file (an
    // image not booted yet) names no machine.
    static const std::string id = [] {
        auto etc = first_line("/etc/machine-id");
        return etc.empty() ? first_line("/var/lib/dbus/machine-id") : etc;
    }();
    return id;
}

bool parse_stat(std::string_view line, StatFields& out) {
    // The command name may hold anything, parentheses and spaces too: fields are counted
    // from the last ')'. After it: state (3), ppid (4), ... starttime (22), each one space
    // apart.
    const size_t close = line.rfind(')');
    if (close == std::string_view::npos)
        return false;
    const char* at = line.data() + close + 1;
    const char* const end = line.data() + line.size();
    for (int field = 2; at < end; ++field) {
        if (*at != ' ')
            return false;
        const char* word = at + 1;
        const char* stop = static_cast<const char*>(std::memchr(word, ' ', end - word));
        if (!stop)
            stop = end;
        if (field + 1 == 4) {
            long ppid = 0;
            if (std::from_chars(word, stop, ppid).ptr != stop)
                return false;
            out.ppid = static_cast<pid_t>(ppid);
        } else if (field + 1 == 22) {
            const char* last = stop;
            while (last > word && (last[-1] == '\n' || last[-1] == ' '))
                --last;
            return std::from_chars(word, last, out.start_time).ptr == last && last > word;
        }
        at = stop;
    }
    return false;
}

std::optional<std::string> identity(pid_t pid) {
    auto fields = stat_of(pid);
    if (!fields || boot_id().empty())
        return std::nullopt;
    return boot_id() + "/" + std::to_string(fields->start_time);
}

bool is_ancestor(pid_t pid, std::string_view id) {
    if (pid <= 1)
        return false;
    // Up the chain of parents; bounded, in case /proc changes under us.
    pid_t at = ::getppid();
    for (int depth = 0; depth < 4096 && at > 1; ++depth) {
        auto fields = stat_of(at);
        if (!fields)
            return false;
        if (at == pid)
            return util::format("{}/{}", boot_id(), fields->start_time) == id;
        at = fields->ppid;
    }
    return false;
}

namespace {

// When this boot began, in Unix ms ("btime" in /proc/stat, whole seconds); 0 if unknown.
long long boot_wall_ms() {
    util::UniqueFd fd(::open("/proc/stat", O_RDONLY | O_CLOEXEC));
    if (!fd)
        return 0;
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0 && text.size() < (1 << 20);)
        text.append(buf, static_cast<size_t>(n));
    const size_t at = text.find("\nbtime ");
    if (at == std::string::npos)
        return 0;
    long long seconds = 0;
    const char* first = text.data() + at + 7;
    std::from_chars(first, text.data() + text.size(), seconds);
    return seconds * 1000;
}

} // namespace

bool is_ancestor_running_at(pid_t pid, long long boottime_ms, long long wall_ms) {
    // Pid 1 too: a container's entrypoint script, which took the lock with `acquire`, is
    // its pid namespace's init, and an ancestor of every process there. What proves the
    // nesting is the holder's secret (job/nested.hpp), not the pid.
    if (pid < 1)
        return false;
    // Recorded before this boot (btime is in whole seconds): not a process of this boot.
    if (const long long boot = boot_wall_ms(); boot == 0 || wall_ms < boot - 1000)
        return false;
    const long ticks = ::sysconf(_SC_CLK_TCK);
    pid_t at = ::getppid();
    for (int depth = 0; depth < 4096 && at >= 1; ++depth) {
        auto fields = stat_of(at);
        if (!fields)
            return false;
        if (at == pid) {
            const auto started_ms =
                static_cast<long long>(fields->start_time * 1000 /
                                       static_cast<unsigned long long>(ticks > 0 ? ticks : 100));
            // A tick of slack: the start time is counted in clock ticks.
            return started_ms <= boottime_ms + 1000 / (ticks > 0 ? ticks : 100);
        }
        at = fields->ppid;
    }
    return false;
}

unsigned long long pid_namespace() {
    struct stat ns {};
    return ::stat("/proc/self/ns/pid", &ns) == 0 ? static_cast<unsigned long long>(ns.st_ino) : 0;
}

} // namespace redlock::process
