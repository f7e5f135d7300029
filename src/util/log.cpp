#include "util/log.hpp"

#include <cerrno>
#include <csignal>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include "util/text.hpp"

namespace redlock::util::log {

namespace {
Level g_level = Level::normal;
}

void set_level(Level level) {
    g_level = level;
}
Level level() {
    return g_level;
}

bool write_if_ready(std::string_view text) {
    pollfd p{STDERR_FILENO, POLLOUT, 0};
    if (::poll(&p, 1, 0) != 1 || (p.revents & POLLOUT) == 0)
        return false;
    write(text);
    return true;
}

void write(std::string_view text) {
    std::string line;
    line.reserve(text.size() + 10);
    // One message, one line: a server's error text or a holder's command quoted in it must
    // not add lines of its own or drive the terminal.
    line.append("redlock: ").append(printable(text)).push_back('\n');
    // A stderr whose reader is gone (redlock ... 2>&1 | head) must not kill us with
    // SIGPIPE, possibly while holding a lock: SIGPIPE is blocked for the write, and the
    // one a failed write raised is taken before the mask is restored.
    sigset_t pipe, old;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old);
    bool broken = false;
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
        ssize_t n = ::write(STDERR_FILENO, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            broken = n < 0 && errno == EPIPE;
            break;
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
    if (broken && !sigismember(&old, SIGPIPE)) {
        timespec now{};
        while (sigtimedwait(&pipe, nullptr, &now) == SIGPIPE) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

} // namespace redlock::util::log
