#pragma once
// A command redlock runs on its own account, beside PROGRAM and never as part of it (the
// --on-lost alert): `/bin/sh -c COMMAND`, stdin /dev/null, stdout and stderr on redlock's
// stderr, in its own process group, bounded in time.
//
// It runs below a small runner process ("rl-hook") that is a "clone child" of redlock (no
// exit signal, as the watchdog is): waitpid(-1) never waits for it, so it never counts
// among PROGRAM's leftovers nor keeps PROGRAM's run from ending, and Child::signal_tree
// and the watchdog leave it and everything below it alone (process::descendants). The
// runner leads a session of its own (the terminal's Ctrl-C and a signal to PROGRAM's
// group do not reach the command), is a child subreaper (what the command leaves behind
// stays below it), and once `timeout` has passed kills the command's whole tree, reaps it,
// and exits. So the command is bounded even if redlock is gone meanwhile, and leaves no
// process and no zombie behind.

#include <chrono>
#include <optional>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

#include "util/clock.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"

namespace redlock::process {

struct HookEnd {
    enum class How {
        exited,    // `code`: the command's exit status (128+N: killed by signal N)
        timed_out, // still running at its deadline: its tree was killed
        not_run,   // fork or exec of /bin/sh failed: `code` is the errno
    } how = How::exited;
    int code = 0;
};

class Hook {
  public:
    using Clock = util::BootClock;

    // Starts `/bin/sh -c command` with `env` added to redlock's environment.
    [[nodiscard]] static util::Expected<Hook>
    start(const std::string& command, const std::vector<std::pair<std::string, std::string>>& env,
          std::chrono::milliseconds timeout);

    Hook(Hook&&) noexcept = default;
    Hook& operator=(Hook&&) noexcept = default;
    Hook(const Hook&) = delete;
    Hook& operator=(const Hook&) = delete;
    // A runner still going is left to its own deadline; once redlock is gone its new
    // parent (init, or the service manager) reaps it.
    ~Hook() = default;

    [[nodiscard]] pid_t pid() const { return m_pid; }
    [[nodiscard]] Clock::time_point deadline() const { return m_deadline; }

    // Waits for the command's end until `until`, or until `interrupt_fd` (a signalfd, or
    // -1) is readable; reaps the runner when it has ended. nullopt: not ended by then.
    [[nodiscard]] std::optional<HookEnd> wait(Clock::time_point until, int interrupt_fd = -1);

  private:
    Hook() = default;
    pid_t m_pid = -1;
    util::UniqueFd m_result; // the read end of the runner's one message
    Clock::time_point m_deadline{};
};

} // namespace redlock::process
