#include "process/cgroup.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <string_view>
#include <sys/file.h>
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

// How far remove_dead_runs_cgroups looks: levels below the hierarchy's root, and cgroups
// read in all (a host with thousands of containers is read in a few milliseconds).
constexpr int k_max_hierarchy_depth = 32;
constexpr size_t k_max_cgroups_read = 100'000;

// Calls visit.entry(name) for each directory in the directory `dir` but . and ..: the
// cgroups below a cgroup. System calls only (process/raw_syscall.hpp).
template <class Visit>
REDLOCK_RAW_CODE void for_each_subdirectory(long dir, Visit& visit) {
    alignas(8) char buf[2048];
    for (long n; (n = raw::sys(SYS_getdents64, dir, raw::arg(buf), sizeof buf)) > 0;) {
        for (long at = 0; at < n;) {
            // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
            unsigned short reclen = 0;
            std::memcpy(&reclen, buf + at + 16, sizeof reclen);
            const unsigned char type = static_cast<unsigned char>(buf[at + 18]);
            const char* entry = buf + at + 19;
            at += reclen;
            const bool dot = entry[0] == '.' && (entry[1] == '\0' || entry[1] == '.');
            if (type == DT_DIR && !dot)
                visit.entry(entry);
        }
    }
}

REDLOCK_RAW_CODE bool remove_cgroup_tree_at(int parent, const char* name, int depth);

struct RemoveEach {
    int dir;
    int depth;
    REDLOCK_RAW_CODE void entry(const char* name) { remove_cgroup_tree_at(dir, name, depth); }
};

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
    RemoveEach below{static_cast<int>(dir), depth + 1};
    for_each_subdirectory(dir, below);
    sys(SYS_close, dir);
    return sys(SYS_unlinkat, parent, arg(name), AT_REMOVEDIR) == 0;
}

// The pid in the name of a run's cgroup ("redlock-PID"), or 0 for any other name.
pid_t run_of(std::string_view name) {
    constexpr std::string_view prefix = "redlock-";
    if (!name.starts_with(prefix) || name.size() == prefix.size() ||
        name.size() > prefix.size() + 9)
        return 0;
    pid_t pid = 0;
    for (const char c : name.substr(prefix.size())) {
        if (c < '0' || c > '9')
            return 0;
        pid = pid * 10 + (c - '0');
    }
    return pid;
}

// Removes the cgroup `name` in `parent`, and those below it, if it is a dead run's: no
// live redlock or watchdog holds its directory (each holds a shared flock on it while it
// lives: Cgroup::create) and it is empty. True once it is gone.
bool remove_if_dead(int parent, const char* name) {
    const util::UniqueFd dir(::openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir)
        return errno == ENOENT;
    return ::flock(dir.get(), LOCK_EX | LOCK_NB) == 0 && remove_cgroup_tree(parent, name);
}

// Whether the cgroup `name` is a run's whose redlock is gone: no process has its pid (one
// that has it may be the run, or a later process with its pid: left alone either way,
// until it ends), and then only if no redlock or watchdog holds it (remove_if_dead).
bool dead_run(const char* name) {
    const pid_t pid = run_of(name);
    return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
}

// Removes the cgroups left below `parent` by dead runs (dead_run, remove_if_dead), down to
// `depth` levels below, in cgroups that are not runs'; `budget` bounds how many
// directories are read. Returns how many were removed.
size_t remove_dead_runs_below(int parent, int depth, size_t& budget);

struct RemoveDeadRuns {
    int dir;
    int depth;
    size_t& budget;
    size_t removed = 0;
    void entry(const char* name) {
        if (dead_run(name)) {
            removed += remove_if_dead(dir, name) ? 1 : 0;
        } else if (run_of(name) == 0 && depth > 0) {
            const util::UniqueFd below(::openat(dir, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
            if (below)
                removed += remove_dead_runs_below(below.get(), depth - 1, budget);
        }
    }
};

size_t remove_dead_runs_below(int parent, int depth, size_t& budget) {
    if (budget == 0)
        return 0;
    --budget;
    const util::UniqueFd dir(::openat(parent, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir)
        return 0;
    RemoveDeadRuns each{dir.get(), depth, budget};
    for_each_subdirectory(dir.get(), each);
    return each.removed;
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
    // Left by an earlier redlock with this pid that died with its watchdog: made again if
    // empty. Not if a live run holds it (one in another pid namespace, with this number).
    if (rc != 0 && errno == EEXIST && remove_if_dead(group.m_parent.get(), group.m_name.c_str()))
        rc = ::mkdirat(group.m_parent.get(), group.m_name.c_str(), 0755);
    if (rc != 0) {
        why_not = util::format("cannot make {}: {}", group.m_path, std::strerror(errno));
        return std::nullopt;
    }
    group.m_dir.reset(
        ::openat(group.m_parent.get(), group.m_name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    // Held, shared, by this redlock and its watchdog (which keeps the descriptor) for as
    // long as either lives: what tells a later run that this one is alive. Only a run
    // removing it as a dead one's holds it otherwise, for a moment.
    if (group.m_dir && ::flock(group.m_dir.get(), LOCK_SH | LOCK_NB) != 0) {
        why_not = util::format("{} is being removed by another run", group.m_path);
        group.m_dir.reset();
        return std::nullopt;
    }
    if (group.m_dir)
        group.m_procs.reset(::openat(group.m_dir.get(), "cgroup.procs", O_WRONLY | O_CLOEXEC));
    if (!group.m_procs) {
        why_not = util::format("{}/cgroup.procs: {}", group.m_path, std::strerror(errno));
        return std::nullopt; // the destructor removes the directory
    }
    // The empty cgroups that runs killed with their watchdogs left beside it go now.
    size_t budget = 1;
    remove_dead_runs_below(group.m_parent.get(), 0, budget);
    return group;
}

size_t remove_dead_runs_cgroups() {
    auto mount = cgroup2_mount();
    const util::UniqueFd root(mount ? ::open(mount->c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                                    : -1);
    size_t budget = k_max_cgroups_read;
    return root ? remove_dead_runs_below(root.get(), k_max_hierarchy_depth, budget) : 0;
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
