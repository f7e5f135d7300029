#include "util/fd.hpp"

#include <cerrno>
#include <fcntl.h>

namespace redlock::util {

namespace {
unsigned g_closed_at_start = 0; // bit N: fd N was closed
}

bool was_closed_at_start(int fd) {
    return fd >= 0 && fd <= STDERR_FILENO && (g_closed_at_start & (1U << fd)) != 0;
}

bool occupy_standard_fds() {
    for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
        if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF)
            continue;
        g_closed_at_start |= 1U << fd;
        // The lower ones are open by now, so open() returns exactly `fd`; the dup2 only
        // guards against a descriptor opened by someone else between the two calls.
        int opened = ::open("/dev/null", fd == STDIN_FILENO ? O_RDONLY : O_WRONLY);
        if (opened < 0)
            return false;
        if (opened != fd) {
            if (::dup2(opened, fd) < 0) {
                ::close(opened);
                return false;
            }
            ::close(opened);
        }
    }
    return true;
}

} // namespace redlock::util
