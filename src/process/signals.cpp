#include "process/signals.hpp"

#include <cerrno>
#include <cstring>
#include <sys/signalfd.h>
#include <unistd.h>

#include "util/format.hpp"

namespace redlock::process {

util::Expected<SignalEvents> SignalEvents::open() {
    SignalEvents events;
    sigset_t watched;
    sigemptyset(&watched);
    for (int sig : k_forwarded_signals)
        sigaddset(&watched, sig);
    sigaddset(&watched, SIGCHLD);
    sigaddset(&watched, SIGTSTP); // Ctrl-Z reaching redlock: stop PROGRAM with it
    sigaddset(&watched, SIGCONT);
    sigset_t blocked = watched;
    sigaddset(&blocked, SIGTTOU);
    // A closed stderr (redlock -v ... 2>&1 | head) must not kill us while we hold the
    // lock: write(2) then fails with EPIPE instead. Blocked, not ignored, so that PROGRAM
    // gets the default back with the original mask.
    sigaddset(&blocked, SIGPIPE);
    if (sigprocmask(SIG_BLOCK, &blocked, &events.m_original) != 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("sigprocmask: {}", std::strerror(errno)));
    events.m_active = true;
    int fd = ::signalfd(-1, &watched, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("signalfd: {}", std::strerror(errno)));
    events.m_fd.reset(fd);
    return events;
}

SignalEvents::~SignalEvents() {
    if (!m_active || !m_fd)
        return;
    // A SIGPIPE left pending by a write to a closed stderr would kill us the moment it is
    // unblocked, turning PROGRAM's status into 141: discard it first.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    timespec now{};
    while (sigtimedwait(&pipe, nullptr, &now) == SIGPIPE) {
    }
    sigprocmask(SIG_SETMASK, &m_original, nullptr);
}

std::vector<int> SignalEvents::read_pending() {
    std::vector<int> out;
    signalfd_siginfo info[8];
    for (;;) {
        ssize_t n = ::read(m_fd.get(), info, sizeof info);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (size_t i = 0; i < static_cast<size_t>(n) / sizeof info[0]; ++i)
            out.push_back(static_cast<int>(info[i].ssi_signo));
    }
    return out;
}

} // namespace redlock::process
