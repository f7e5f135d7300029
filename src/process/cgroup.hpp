#pragma once
// PROGRAM's own cgroup (v2): a child of redlock's cgroup that PROGRAM joins before exec.
// Whatever PROGRAM starts stays in it, whatever process group or session it moves to and
// whoever its parent becomes (unless it is moved to another cgroup: root may, and a
// service manager does; the watchdog looks for that), so the whole tree can be killed at
// once with cgroup.kill
// (what systemd's KillMode=control-group does): by redlock, or by the watchdog once
// redlock is gone. It is made only where it can be (cgroup v2 mounted, redlock's own
// cgroup writable: root, or a delegated subtree such as a systemd user service); else
// PROGRAM runs without one, and SAFETY in redlock(1) says what is lost.

#include <optional>
#include <string>
#include <sys/types.h>

#include "util/fd.hpp"

namespace redlock::process {

class Cgroup {
  public:
    // A new, empty cgroup for the run of process `owner`, or nullopt (with why in
    // `why_not`, for -v) when none can be made here.
    [[nodiscard]] static std::optional<Cgroup> create(pid_t owner, std::string& why_not);

    Cgroup(Cgroup&&) noexcept;
    Cgroup& operator=(Cgroup&&) noexcept;
    Cgroup(const Cgroup&) = delete;
    Cgroup& operator=(const Cgroup&) = delete;
    // Removes the cgroup if it is empty (remove()).
    ~Cgroup();

    // cgroup.procs, open for writing: a process that writes "0" to it joins the cgroup.
    [[nodiscard]] int procs_fd() const { return m_procs.get(); }
    // The cgroup's directory, and its parent's with its name there: what the watchdog
    // needs to kill and then remove it on its own.
    [[nodiscard]] int dir_fd() const { return m_dir.get(); }
    [[nodiscard]] int parent_fd() const { return m_parent.get(); }
    [[nodiscard]] const std::string& name() const { return m_name; }
    [[nodiscard]] const std::string& path() const { return m_path; }
    // Its path in the cgroup v2 hierarchy, as /proc/PID/cgroup shows it ("0::/a/redlock-N"):
    // how the watchdog tells whether a process of PROGRAM's tree is still in it.
    [[nodiscard]] const std::string& hierarchy_path() const { return m_hierarchy_path; }

    // Sends `sig` to every process in the cgroup; SIGKILL through cgroup.kill, which no
    // fork can race (Linux 5.14 on; before, process by process until none is left).
    void signal(int sig) const;
    // Whether any process is still in it.
    [[nodiscard]] bool populated() const;
    // Removes the cgroup, and any left below it by a run nested in PROGRAM, if they are
    // empty: as soon as PROGRAM's tree has been reaped, so that a redlock killed later
    // (during its release) leaves none behind. Afterwards the object holds no cgroup.
    void remove();

  private:
    Cgroup() = default;

    util::UniqueFd m_parent;
    util::UniqueFd m_dir;
    util::UniqueFd m_procs;
    std::string m_name; // in m_parent
    std::string m_path; // for messages
    std::string m_hierarchy_path;
};

// Removes the empty cgroups that runs killed together with their watchdogs left anywhere
// in the cgroup v2 hierarchy (Cgroup::create removes those beside the one it makes): a
// run's whose redlock has ended, that no live redlock or watchdog holds, and that is
// empty; never a live run's. Returns how many it removed. For `redlock reap`.
size_t remove_dead_runs_cgroups();

// Removes cgroup `name` in the directory `parent` and every cgroup below it, deepest first
// (the kernel refuses to remove one that has children); true once it is gone. Only empty
// cgroups can go. System calls only (process/raw_syscall.hpp): the watchdog uses it too.
bool remove_cgroup_tree(int parent, const char* name);

// This process's cgroup v2: where it lives in the file system ("/sys/fs/cgroup/a/b", from
// the cgroup v2 mount) and its path in the hierarchy ("/a/b", the "0::" line of
// /proc/self/cgroup); nullopt without one.
struct CgroupPlace {
    std::string directory;
    std::string hierarchy_path;
};
[[nodiscard]] std::optional<CgroupPlace> own_cgroup(std::string& why_not);

} // namespace redlock::process
