#include "util/log.hpp"

#include <cerrno>
#include <poll.h>
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
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
        ssize_t n = ::write(STDERR_FILENO, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        p += n;
        left -= static_cast<size_t>(n);
    }
}

} // namespace redlock::util::log
