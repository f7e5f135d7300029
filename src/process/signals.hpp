#pragma once
// Signals become events: the ones redlock reacts to are blocked and read from a signalfd in
// the main loop, so no work ever happens inside a signal handler.

#include <csignal>
#include <vector>

#include "util/error.hpp"
#include "util/fd.hpp"

namespace redlock::process {

// The signals redlock forwards to PROGRAM: every one whose default action would kill
// redlock and that someone sends on purpose. USR1, USR2 and ALRM are included because a
// default death would leave PROGRAM to the watchdog's SIGKILL and the lock to its TTL.
inline constexpr int k_forwarded_signals[] = {SIGTERM, SIGINT,  SIGHUP, SIGQUIT,
                                              SIGUSR1, SIGUSR2, SIGALRM};

[[nodiscard]] inline bool is_forwarded(int sig) {
    for (int s : k_forwarded_signals)
        if (s == sig)
            return true;
    return false;
}

class SignalEvents {
  public:
    // Blocks the forwarded signals, CHLD, CONT, TSTP, TTOU (so that the terminal can be
    // handed back from the background) and PIPE, and opens a non-blocking signalfd for all
    // but TTOU and PIPE.
    [[nodiscard]] static util::Expected<SignalEvents> open();

    SignalEvents(SignalEvents&&) = default;
    SignalEvents& operator=(SignalEvents&&) = default;
    ~SignalEvents();

    [[nodiscard]] int fd() const { return m_fd.get(); }
    // The signals delivered since the last call, in order (CHLD coalesced).
    [[nodiscard]] std::vector<int> read_pending();
    // The mask to restore in PROGRAM before exec.
    [[nodiscard]] const sigset_t& original_mask() const { return m_original; }

  private:
    SignalEvents() = default;
    util::UniqueFd m_fd;
    sigset_t m_original{};
    bool m_active = false;
};

} // namespace redlock::process
