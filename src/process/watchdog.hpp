#pragma once
// The kernel kills PROGRAM when redlock dies (PR_SET_PDEATHSIG), but not what PROGRAM
// started: a script's running command would go on unlocked after `kill -9` of redlock.
// The watchdog is a small process that waits on a pipe from redlock: if the pipe closes
// without redlock saying "done", it SIGKILLs PROGRAM's process group.
//
// It is a "clone child" (no exit signal), so waitpid(-1) never waits for it and it never
// counts among PROGRAM's leftovers.

#include <sys/types.h>

#include "util/error.hpp"
#include "util/fd.hpp"

namespace redlock::process {

class Watchdog {
  public:
    // Starts a watchdog for PROGRAM's process group `pgid`.
    [[nodiscard]] static util::Expected<Watchdog> start(pid_t pgid);

    [[nodiscard]] pid_t pid() const { return m_pid; }
    // Redlock is done with PROGRAM: the watchdog exits without killing anything.
    void disarm();

  private:
    util::UniqueFd m_pipe; // write end; the watchdog holds the read end
    pid_t m_pid = -1;
};

} // namespace redlock::process
