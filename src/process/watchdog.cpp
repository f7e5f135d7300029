#include "process/watchdog.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/format.hpp"

namespace redlock::process {

namespace {

constexpr char k_done = 'd';

[[noreturn]] void watch(int fd, pid_t pgid) {
    // Own session: neither the terminal's signals nor a kill of redlock's process group
    // reach it. Every catchable signal blocked; no stdio held open for a caller to wait on.
    ::setsid();
    sigset_t all;
    sigfillset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr);
    ::close_range(0, static_cast<unsigned>(fd) - 1, 0);
    ::close_range(static_cast<unsigned>(fd) + 1, ~0U, 0);
    char word = 0;
    ssize_t n;
    do
        n = ::read(fd, &word, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1 || word != k_done)
        ::kill(-pgid, SIGKILL); // the pipe closed: redlock died without saying so
    ::_exit(0);
}

} // namespace

util::Expected<Watchdog> Watchdog::start(pid_t pgid) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("pipe: {}", std::strerror(errno)));
    util::UniqueFd read_end(fds[0]);
    Watchdog dog;
    dog.m_pipe.reset(fds[1]);
    // fork() without an exit signal: see the header.
    long pid = ::syscall(SYS_clone, 0L, nullptr, nullptr, nullptr, nullptr);
    if (pid < 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("clone: {}", std::strerror(errno)));
    if (pid == 0) {
        dog.m_pipe.reset();
        watch(read_end.get(), pgid);
    }
    dog.m_pid = static_cast<pid_t>(pid);
    return dog;
}

void Watchdog::disarm() {
    if (m_pipe)
        (void)!::write(m_pipe.get(), &k_done, 1);
    m_pipe.reset();
}

} // namespace redlock::process
