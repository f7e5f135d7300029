#pragma once
// The watchdog: a small process that stops PROGRAM when redlock cannot. It is started
// before PROGRAM with the lease's first deadlines and is sent new ones after every
// renewal. It acts on its own when
//   - a deadline passes: redlock did not renew in time because it is stopped (SIGSTOP,
//     Ctrl-Z), starved, or the machine was suspended. At `term_at` (plus a short grace for
//     redlock to act first) it sends TERM and CONT to PROGRAM's tree, at `kill_at` KILL,
//     the schedule of a lost lease, so PROGRAM is gone before the lease can expire on the
//     servers. Its timer runs on CLOCK_BOOTTIME, which counts suspend;
//   - the pipe from redlock closes without "done": redlock died (even by SIGKILL). The
//     kernel kills PROGRAM itself (PR_SET_PDEATHSIG); the watchdog kills PROGRAM's process
//     group, which holds what PROGRAM started.
// PROGRAM's tree is the process group and every process descended from redlock (a child
// subreaper, so orphans stay below it), the watchdog excepted.
//
// It is a "clone child" (no exit signal), so waitpid(-1) never waits for it and it never
// counts among PROGRAM's leftovers; it runs in its own session with every signal blocked,
// so neither the terminal nor a signal to redlock's process group stops or kills it. It
// shares redlock's memory (CLONE_VM, on x86-64 and arm64): nothing is copied to start it,
// and it touches nothing of redlock's (watchdog.cpp says how). If the watchdog itself is
// stopped as well as redlock, nothing is left to act: see SAFETY in redlock(1).

#include <string_view>
#include <sys/types.h>

#include "util/clock.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"

namespace redlock::process {

class Watchdog {
  public:
    using Clock = util::BootClock;

    // Starts a watchdog over this process's descendants with the first deadlines.
    [[nodiscard]] static util::Expected<Watchdog> start(Clock::time_point term_at,
                                                        Clock::time_point kill_at);

    [[nodiscard]] pid_t pid() const { return m_pid; }
    // PROGRAM's process group, killed too (and the only thing left to kill if redlock dies).
    void watch_group(pid_t pgid);
    // The lease was renewed: new deadlines.
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

// Whether a process of this kernel (uname's release, "6.1.0-13-amd64") that dumps core
// leaves the other processes sharing its memory alone: from Linux 5.16 on. Before, a
// crashing redlock (abort, SIGSEGV, even with core files off) would kill a watchdog that
// shares its memory, so there the watchdog is a copy.
[[nodiscard]] bool kernel_spares_memory_sharers(std::string_view release);

} // namespace redlock::process
