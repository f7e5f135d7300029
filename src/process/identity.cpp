#include "process/identity.hpp"

#include <charconv>
#include <fcntl.h>
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
    auto line = read_small(util::format("/proc/{}/stat", pid).c_str());
    StatFields fields;
    if (!line || !parse_stat(*line, fields))
        return std::nullopt;
    return fields;
}

const std::string& boot_id() {
    static const std::string id = [] {
        auto text = read_small("/proc/sys/kernel/random/boot_id");
        std::string out = text ? *text : std::string();
        while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
            out.pop_back();
        return out;
    }();
    return id;
}

} // namespace

bool parse_stat(std::string_view line, StatFields& out) {
    // The command name may hold anything, parentheses and spaces too: fields are counted
    // from the last ')'. After it: state (3), ppid (4), ... starttime (22).
    const size_t close = line.rfind(')');
    if (close == std::string_view::npos)
        return false;
    std::string_view rest = line.substr(close + 1);
    int field = 2;
    while (!rest.empty()) {
        while (!rest.empty() && rest.front() == ' ')
            rest.remove_prefix(1);
        const size_t end = std::min(rest.find(' '), rest.size());
        const std::string_view word = rest.substr(0, end);
        rest.remove_prefix(end);
        if (word.empty())
            break;
        ++field;
        const char* first = word.data();
        const char* last = word.data() + word.size();
        if (field == 4) {
            long ppid = 0;
            if (std::from_chars(first, last, ppid).ptr != last)
                return false;
            out.ppid = static_cast<pid_t>(ppid);
        } else if (field == 22) {
            return std::from_chars(first, last, out.start_time).ptr == last;
        }
    }
    return false;
}

std::optional<std::string> identity(pid_t pid) {
    auto fields = stat_of(pid);
    if (!fields || boot_id().empty())
        return std::nullopt;
    return util::format("{}/{}", boot_id(), fields->start_time);
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

} // namespace redlock::process
