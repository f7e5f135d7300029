#pragma once
// The watchdog: a small process that stops PROGRAM when redlock cannot, and frees the lock
// when redlock dies. It is started before the first attempt to acquire, is sent the
// lease's deadlines once acquired and new ones after every renewal, and is told when
// PROGRAM is being started and when its tree is reaped. It acts on its own when
//   - a deadline passes: redlock did not renew in time because it is stopped (SIGSTOP,
//     Ctrl-Z), starved, or the machine was suspended. At `term_at` (plus a short grace for
//     redlock to act first) it sends TERM and CONT to PROGRAM's tree, at `kill_at` KILL,
//     the schedule of a lost lease, so PROGRAM is gone before the lease can expire on the
//     servers. Its timer runs on CLOCK_BOOTTIME, which counts suspend;
//   - the pipe from redlock closes without "done": redlock died (SIGKILL, the OOM killer,
//     a crash). The kernel kills PROGRAM itself (PR_SET_PDEATHSIG); the watchdog kills
//     everything else of PROGRAM's at once, again until nothing is left. Then, given the
//     run's will (job/will.hpp), it becomes the releaser (`redlock __release-dead-run`,
//     job/dead_run.hpp) with its verdict on the tree (TreeReport): the lock is released
//     with the run's token once the tree is proven gone, and keeps its TTL otherwise.
// PROGRAM's tree is its cgroup (process/cgroup.hpp) where it has one, its process group,
// its session when it leads one, and every process descended from redlock (a child
// subreaper, so orphans stay below it while redlock lives), the watchdog excepted. The
// watchdog looks at that tree every 20 ms while redlock lives (pid and start time of each
// process, and with a cgroup whether each is still in it): once redlock is gone, its
// descendants are re-parented out of reach, and the last look is what it stops, with
// everything still below, then kills. A process seen outside the cgroup makes the tree
// unprovable: cgroup.kill does not reach what it starts.
//
// It is a "clone child" (no exit signal), so waitpid(-1) never waits for it and it never
// counts among PROGRAM's leftovers (where such a clone is refused, under qemu-user, it is
// a grandchild re-parented away from redlock instead); it runs in its own session with every signal
// blocked, so neither the terminal nor a signal to redlock's process group stops or kills it. It is
// a copy of redlock, not a sharer of its memory (which the OOM killer kills with it), and
// is named k_watchdog_name (which `killall redlock` does not match). redlock watches it in
// turn (pipe_fd): a watchdog that dies makes redlock stop PROGRAM. If the watchdog itself
// is killed or stopped as well as redlock, nothing is left to act: see SAFETY in redlock(1).

#include <chrono>
#include <cstdint>
#include <sys/types.h>

#include "process/cgroup.hpp"
#include "util/clock.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"

namespace redlock::process {

// The watchdog's process name (ps, top, /proc/PID/comm): not "redlock", so that a kill of
// every process by that name leaves it to clean up after them.
inline constexpr char k_watchdog_name[] = "rl-watchdog";

// The internal command the watchdog becomes once redlock is gone (hidden from help).
inline constexpr char k_release_command[] = "__release-dead-run";

// What the watchdog writes into the will, at k_tree_report_offset, before it becomes the
// releaser: whether PROGRAM's tree was proven gone, and what it found.
struct TreeReport {
    char magic[8];       // k_tree_report_magic
    std::int32_t proven; // 1: proven gone (or never started); 0: not
    char why[244];       // NUL-terminated
};
inline constexpr long k_tree_report_offset = 256;
inline constexpr char k_tree_report_magic[] = "rltree1";

class Watchdog {
  public:
    using Clock = util::BootClock;

    // Starts a watchdog over this process's descendants, and over `cgroup` (PROGRAM's, or
    // null) if given, with no deadlines yet; with the run's will (`will_fd`, or -1 for
    // none) for when redlock dies.
    [[nodiscard]] static util::Expected<Watchdog> start(const Cgroup* cgroup, int will_fd);

    [[nodiscard]] pid_t pid() const { return m_pid; }
    // How long after the TERM deadline the watchdog sends TERM itself: redlock, when it
    // runs, signals at the deadline, and the watchdog sends none. A redlock back (from a
    // stop, from starvation) later than this finds PROGRAM signalled by the watchdog.
    static constexpr std::chrono::nanoseconds k_term_grace{100'000'000};
    // The write end of the pipe to the watchdog: poll() reports POLLERR on it once the
    // watchdog is gone (no reader left). -1 once disarmed.
    [[nodiscard]] int pipe_fd() const { return m_pipe.get(); }
    // PROGRAM's process group, killed too, whether PROGRAM leads a session of its own
    // (whose members are PROGRAM's, found even once redlock is gone), and whether it runs
    // in the cgroup given to start() (which then holds its tree, as long as no process
    // is seen to leave it).
    void watch_group(pid_t pgid, bool session, bool in_cgroup);
    // PROGRAM is about to be started (before the fork): from now on there is a tree to kill
    // and prove gone.
    void spawning();
    // PROGRAM and everything it started have been reaped (and its cgroup removed): a
    // redlock that dies from now on has nothing left to kill, and the watchdog no longer
    // acts on the deadlines. It stays armed until disarm(), for the release.
    void reaped();
    // The lock was acquired, or the lease was renewed: new deadlines.
    void update(Clock::time_point term_at, Clock::time_point kill_at);
    // The lease is lost and redlock has sent TERM itself: only the KILL deadline remains.
    void lost(Clock::time_point kill_at);
    // Redlock is done with PROGRAM: the watchdog exits without killing anything.
    void disarm();

  private:
    void send(char kind, long long a, long long b);

    util::UniqueFd m_pipe; // write end (non-blocking); the watchdog holds the read end
    pid_t m_pid = -1;
};

} // namespace redlock::process
