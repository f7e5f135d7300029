#pragma once
// PROGRAM as a supervised child: exec'd directly (no shell) in its own process group,
// with the terminal handed to it when redlock runs in the foreground. If redlock dies,
// the kernel kills PROGRAM (PR_SET_PDEATHSIG), or without a cgroup stops it, so that the
// watchdog finds its children below it and kills them with it. redlock is a child
// subreaper, so whatever PROGRAM leaves behind is re-parented to redlock and can be found
// and stopped. Where it can, PROGRAM joins a cgroup of its own before exec
// (process/cgroup.hpp); without a controlling terminal it also gets a session of its own,
// which its descendants can leave only with setsid: both are how the watchdog finds them
// once redlock is gone.

#include <csignal>
#include <optional>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

#include "util/error.hpp"
#include "util/fd.hpp"

namespace redlock::process {

class Cgroup;

struct SpawnOptions {
    std::vector<std::string> argv;                        // PROGRAM and its arguments
    std::vector<std::pair<std::string, std::string>> env; // variables to set in PROGRAM
    const sigset_t* child_mask = nullptr;                 // signal mask to restore
    const Cgroup* cgroup = nullptr; // PROGRAM's own, to start it in; must outlive the Child
};

class Child {
  public:
    // Starts PROGRAM. Fails with not_found (127) or cannot_execute (126) when exec fails,
    // after reaping the short-lived child.
    [[nodiscard]] static util::Expected<Child> spawn(const SpawnOptions& options);

    [[nodiscard]] pid_t pid() const { return m_pid; }
    [[nodiscard]] bool has_terminal() const { return m_terminal; }
    // Whether PROGRAM leads a session of its own (no controlling terminal to keep).
    [[nodiscard]] bool own_session() const { return m_session; }
    // Whether PROGRAM started in SpawnOptions::cgroup; if not, why (errno) in
    // cgroup_error().
    [[nodiscard]] bool in_cgroup() const { return m_cgroup_error == 0; }
    [[nodiscard]] int cgroup_error() const { return m_cgroup_error; }

    // Sends `sig` to PROGRAM's process group.
    void signal_group(int sig) const;
    // Sends `sig` to PROGRAM's group and to every process descended from redlock (but the
    // one set with ignore_descendant: the watchdog).
    void signal_tree(int sig) const;
    void ignore_descendant(pid_t pid) { m_ignored = pid; }

    // Takes the terminal back (if PROGRAM had it), e.g. before redlock exits.
    void reclaim_terminal() const;
    // Job control: PROGRAM stopped on a terminal signal (Ctrl-Z). Stops redlock too, so
    // the shell sees the job stopped, and on resume hands the terminal back to PROGRAM,
    // still stopped: the caller continues it (or not).
    void suspend_with_program() const;
    // PROGRAM was stopped for touching the terminal from outside the foreground group
    // (SIGTTIN, SIGTTOU): it is in a pipeline (`redlock run ... | cat`) or the job was
    // started with `&`. When redlock's job is in the background, redlock stops itself
    // first, so the shell reports the job as stopped as it would PROGRAM alone; `fg`
    // continues it. Then, if the job is in the foreground, the terminal goes to PROGRAM's
    // group (the rest of the pipeline gets it back when PROGRAM is done). The caller
    // continues PROGRAM. Returns whether redlock was suspended meanwhile, or an error when
    // there is no terminal to hand over.
    [[nodiscard]] util::Expected<bool> hand_terminal_on_demand();

  private:
    pid_t m_pid = -1;
    pid_t m_ignored = -1;
    const Cgroup* m_cgroup = nullptr;
    bool m_terminal = false; // PROGRAM's group is (or was made) the terminal's foreground
    bool m_session = false;
    int m_cgroup_error = -1;    // 0: in the cgroup; else errno, or -1 with none asked for
    int m_tty = -1;             // the terminal's fd: stdin, or /dev/tty opened on demand
    util::UniqueFd m_tty_owner; // an opened /dev/tty
};

// Replaces redlock with PROGRAM (a nested run: the outer run supervises it). Returns only
// when exec failed: not_found (127) or cannot_execute (126).
[[nodiscard]] util::Error exec_in_place(const std::vector<std::string>& argv);

// Reaps every child that has changed state. Records PROGRAM's wait status when it ends,
// and reports whether PROGRAM stopped (job control). Returns true while any child remains.
struct ReapResult {
    bool children_remain = false;
    int program_stopped_by = 0; // SIGTSTP, SIGTTIN or SIGTTOU when PROGRAM stopped on one
};
ReapResult reap_children(pid_t program, std::optional<int>& program_status);

// The exit status for a wait status: the exit code, or 128+N for signal N.
[[nodiscard]] int exit_status_of(int wait_status);

// Enables child-subreaper mode for this process.
void become_subreaper();

// Every process descended from `root` (default: this one), found through /proc, but for
// the root's "clone children" (no exit signal: the watchdog, a hook's runner, which the
// root made itself) and what is below them.
[[nodiscard]] std::vector<pid_t> descendants(pid_t root = 0);

// Whether no other process shares this one's process group (a shell pipeline does).
[[nodiscard]] bool alone_in_process_group();

} // namespace redlock::process
