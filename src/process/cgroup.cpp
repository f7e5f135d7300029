#include "process/cgroup.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <string_view>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <vector>

#include "process/raw_syscall.hpp"
#include "util/file.hpp"
#include "util/format.hpp"

namespace redlock::process {

namespace {

bool is_cgroup2(const char* path) {
    struct statfs fs {};
    return ::statfs(path, &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC;
}

// The cgroup v2 mount point: where systemd puts it (unified, or hybrid), else the first
// cgroup2 line of mountinfo ("36 25 0:31 / /sys/fs/cgroup rw,... - cgroup2 cgroup2 rw").
std::optional<std::string> cgroup2_mount() {
    for (const char* path : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"})
        if (is_cgroup2(path))
            return path;
    int error = 0;
    auto info = util::read_file("/proc/self/mountinfo", size_t{1} << 20, error);
    if (!info)
        return std::nullopt;
    std::string_view text = info->text;
    while (!text.empty()) {
        const size_t end = std::min(text.find('\n'), text.size());
        const std::string_view line = text.substr(0, end);
        text.remove_prefix(std::min(end + 1, text.size()));
        const size_t dash = line.find(" - cgroup2 ");
        if (dash == std::string_view::npos)
            continue;
        // The mount point is the fifth field; octal escapes (\040) are left as they are:
        // such a mount point is simply not found.
        size_t at = 0;
        for (int field = 0; field < 4 && at != std::string_view::npos; ++field)
            at = line.find(' ', at + 1);
        if (at == std::string_view::npos)
            continue;
        const size_t stop = line.find(' ', at + 1);
        return std::string(line.substr(at + 1, stop - at - 1));
    }
    return std::nullopt;
}

bool write_text(int fd, std::string_view text) {
    return ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

// The pids in the cgroup's cgroup.procs.
std::vector<pid_t> members(int dir) {
    std::vector<pid_t> out;
    util::UniqueFd fd(::openat(dir, "cgroup.procs", O_RDONLY | O_CLOEXEC));
    if (!fd)
        return out;
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0;)
        text.append(buf, static_cast<size_t>(n));
    long pid = 0;
    bool digits = false;
    for (char c : text) {
        if (c >= '0' && c <= '9') {
            pid = pid * 10 + (c - '0');
            digits = true;
        } else {
            if (digits && pid > 0)
                out.push_back(static_cast<pid_t>(pid));
            pid = 0;
            digits = false;
        }
    }
    return out;
}

// How deep remove_cgroup_tree goes below the cgroup it removes: a run nested in a run
// nested in PROGRAM is two levels.
constexpr int k_max_cgroup_depth = 8;

REDLOCK_RAW_CODE bool remove_cgroup_tree_at(int parent, const char* name, int depth) {
    using raw::arg;
    using raw::sys;
    long rc = sys(SYS_unlinkat, parent, arg(name), AT_REMOVEDIR);
    if (rc == 0 || rc == -ENOENT)
        return true;
    if (rc != -EBUSY && rc != -ENOTEMPTY)
        return false;
    if (depth >= k_max_cgroup_depth)
        return false;
    const long dir = sys(SYS_openat, parent, arg(name), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return false;
    alignas(8) char buf[2048];
    for (long n; (n = sys(SYS_getdents64, dir, arg(buf), sizeof buf)) > 0;) {
        for (long at = 0; at < n;) {
            // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
            unsigned short reclen = 0;
            std::memcpy(&reclen, buf + at + 16, sizeof reclen);
            const unsigned char type = static_cast<unsigned char>(buf[at + 18]);
            const char* entry = buf + at + 19;
            at += reclen;
            const bool dot = entry[0] == '.' && (entry[1] == '\0' || entry[1] == '.');
            if (type == DT_DIR && !dot)
                remove_cgroup_tree_at(static_cast<int>(dir), entry, depth + 1);
        }
    }
    sys(SYS_close, dir);
    return sys(SYS_unlinkat, parent, arg(name), AT_REMOVEDIR) == 0;
}

} // namespace

REDLOCK_RAW_CODE bool remove_cgroup_tree(int parent, const char* name) {
    return remove_cgroup_tree_at(parent, name, 0);
}

std::optional<CgroupPlace> own_cgroup(std::string& why_not) {
    auto mount = cgroup2_mount();
    if (!mount) {
        why_not = "no cgroup v2 file system is mounted";
        return std::nullopt;
    }
    int error = 0;
    auto cgroup = util::read_file("/proc/self/cgroup", 64 * 1024, error);
    if (!cgroup) {
        why_not = util::format("/proc/self/cgroup: {}", std::strerror(error));
        return std::nullopt;
    }
    // "0::/user.slice/user-1000.slice/session-2.scope", the v2 line among v1 ones.
    std::string_view text = cgroup->text;
    while (!text.empty()) {
        const size_t end = std::min(text.find('\n'), text.size());
        const std::string_view line = text.substr(0, end);
        text.remove_prefix(std::min(end + 1, text.size()));
        if (line.starts_with("0::/")) {
            CgroupPlace place{*mount, std::string(line.substr(3))};
            if (line.size() > 4)
                place.directory.append(place.hierarchy_path);
            return place;
        }
    }
    why_not = "this process has no cgroup v2";
    return std::nullopt;
}

std::optional<Cgroup> Cgroup::create(pid_t owner, std::string& why_not) {
    auto parent = own_cgroup(why_not);
    if (!parent)
        return std::nullopt;
    Cgroup group;
    group.m_parent.reset(::open(parent->directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!group.m_parent) {
        why_not = util::format("{}: {}", parent->directory, std::strerror(errno));
        return std::nullopt;
    }
    group.m_name = util::format("redlock-{}", owner);
    group.m_path = parent->directory + "/" + group.m_name;
    group.m_hierarchy_path =
        (parent->hierarchy_path == "/" ? "" : parent->hierarchy_path) + "/" + group.m_name;
    int rc = ::mkdirat(group.m_parent.get(), group.m_name.c_str(), 0755);
    // Left by an earlier redlock with this pid that died with its watchdog: reused if empty.
    if (rc != 0 && errno == EEXIST &&
        remove_cgroup_tree(group.m_parent.get(), group.m_name.c_str()))
        rc = ::mkdirat(group.m_parent.get(), group.m_name.c_str(), 0755);
    if (rc != 0) {
        why_not = util::format("cannot make {}: {}", group.m_path, std::strerror(errno));
        return std::nullopt;
    }
    group.m_dir.reset(
        ::openat(group.m_parent.get(), group.m_name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (group.m_dir)
        group.m_procs.reset(::openat(group.m_dir.get(), "cgroup.procs", O_WRONLY | O_CLOEXEC));
    if (!group.m_procs) {
        why_not = util::format("{}/cgroup.procs: {}", group.m_path, std::strerror(errno));
        return std::nullopt; // the destructor removes the directory
    }
    return group;
}

Cgroup::Cgroup(Cgroup&& other) noexcept = default;

Cgroup& Cgroup::operator=(Cgroup&& other) noexcept {
    if (this != &other) {
        remove();
        m_parent = std::move(other.m_parent);
        m_dir = std::move(other.m_dir);
        m_procs = std::move(other.m_procs);
        m_name = std::move(other.m_name);
        m_path = std::move(other.m_path);
        m_hierarchy_path = std::move(other.m_hierarchy_path);
    }
    return *this;
}

Cgroup::~Cgroup() {
    remove();
}

void Cgroup::remove() {
    if (!m_parent || m_name.empty())
        return;
    m_procs.reset();
    m_dir.reset();
    (void)remove_cgroup_tree(m_parent.get(), m_name.c_str());
    m_parent.reset();
}

void Cgroup::signal(int sig) const {
    if (!m_dir)
        return;
    if (sig == SIGKILL) {
        util::UniqueFd kill(::openat(m_dir.get(), "cgroup.kill", O_WRONLY | O_CLOEXEC));
        if (kill && write_text(kill.get(), "1"))
            return;
    }
    // Before cgroup.kill: a process forked while this runs is caught by the next round.
    for (int round = 0; round < (sig == SIGKILL ? 100 : 1); ++round) {
        auto pids = members(m_dir.get());
        if (pids.empty())
            return;
        for (pid_t pid : pids)
            ::kill(pid, sig);
    }
}

bool Cgroup::populated() const {
    if (!m_dir)
        return false;
    util::UniqueFd fd(::openat(m_dir.get(), "cgroup.events", O_RDONLY | O_CLOEXEC));
    char buf[256];
    const ssize_t n = fd ? ::read(fd.get(), buf, sizeof buf) : -1;
    if (n <= 0)
        return !members(m_dir.get()).empty();
    return std::string_view(buf, static_cast<size_t>(n)).find("populated 1") !=
           std::string_view::npos;
}

} // namespace redlock::process
