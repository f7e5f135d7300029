#include "process/hook.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "process/child.hpp"
#include "util/format.hpp"

extern char** environ; // NOLINT(readability-redundant-declaration)

namespace redlock::process {

namespace {

// The runner's one message to redlock, written just before it exits.
struct Message {
    int how;
    int code;
};

// Everything the runner needs, made before the clone (the runner then allocates nothing
// but what process::descendants does, in its own copy of the memory).
struct RunnerSetup {
    std::vector<char*> argv;
    std::vector<char*> envp;
    int result_fd = -1;
    std::chrono::nanoseconds timeout{};
};

timespec to_timespec(std::chrono::nanoseconds d) {
    if (d.count() < 0)
        d = {};
    return timespec{static_cast<time_t>(d.count() / 1'000'000'000),
                    static_cast<long>(d.count() % 1'000'000'000)};
}

void say(int fd, HookEnd end) {
    const Message m{static_cast<int>(end.how), end.code};
    (void)!::write(fd, &m, sizeof m); // a pipe takes 8 bytes whole
}

// The runner: a copy of redlock (fork semantics, one thread), which runs the command and
// bounds it. Never returns.
[[noreturn]] void run_hook(const RunnerSetup& setup) {
    // Nothing of redlock's stays open here (its Redis sockets, its signalfd, and above all
    // the watchdog's pipe, whose end must come when redlock's does), but the standard
    // descriptors and the result pipe, moved to 3.
    int result = setup.result_fd;
    if (result != 3) {
        ::dup2(result, 3);
        result = 3;
    }
    ::syscall(SYS_close_range, 4U, ~0U, 0U);
    ::setsid();
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    ::prctl(PR_SET_NAME, "rl-hook");
    sigset_t all;
    sigfillset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr); // CHLD is waited for with sigtimedwait

    // The raw system call rather than fork(3): this process is itself a raw clone, whose
    // libc (and sanitizer runtime) still take it for redlock's thread; the child only
    // makes system calls before exec.
    const auto sh =
        static_cast<pid_t>(::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, 0UL));
    if (sh == 0) {
        ::setpgid(0, 0);
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null >= 0)
            ::dup2(null, STDIN_FILENO);
        ::dup2(STDERR_FILENO, STDOUT_FILENO); // stdout belongs to PROGRAM
        ::execve("/bin/sh", setup.argv.data(), setup.envp.data());
        ::_exit(127);
    }
    if (sh < 0) {
        say(result, {HookEnd::How::not_run, errno});
        ::_exit(0);
    }
    ::setpgid(sh, sh);

    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    const auto deadline = Hook::Clock::now() + setup.timeout;
    std::optional<int> status;
    bool killed = false;
    for (;;) {
        int st = 0;
        pid_t pid = 0;
        while ((pid = ::waitpid(-1, &st, WNOHANG)) > 0)
            if (pid == sh)
                status = st;
        if (pid < 0 && errno == ECHILD)
            break; // the command and everything it started are gone
        const auto now = Hook::Clock::now();
        if (now >= deadline) {
            // Its whole tree: the group, and whatever left it (orphans come back here).
            ::kill(-sh, SIGKILL);
            for (pid_t p : descendants(::getpid()))
                ::kill(p, SIGKILL);
            killed = killed || !status;
        }
        const auto wake = now >= deadline ? std::chrono::nanoseconds(std::chrono::milliseconds(50))
                                          : std::chrono::nanoseconds(deadline - now);
        const timespec ts = to_timespec(wake);
        ::sigtimedwait(&chld, nullptr, &ts);
    }
    if (killed || !status)
        say(result, {HookEnd::How::timed_out, 0});
    else if (WIFSIGNALED(*status))
        say(result, {HookEnd::How::exited, 128 + WTERMSIG(*status)});
    else
        say(result, {HookEnd::How::exited, WEXITSTATUS(*status)});
    ::_exit(0);
}

} // namespace

util::Expected<Hook> Hook::start(const std::string& command,
                                 const std::vector<std::pair<std::string, std::string>>& env,
                                 std::chrono::milliseconds timeout) {
    // argv and envp built here: the runner only reads them.
    std::vector<std::string> strings{"sh", "-c", command};
    for (const auto& [name, value] : env)
        strings.push_back(name + "=" + value);
    RunnerSetup setup;
    for (size_t i = 0; i < 3; ++i)
        setup.argv.push_back(strings[i].data());
    setup.argv.push_back(nullptr);
    for (char** e = environ; e && *e; ++e) {
        const std::string_view entry(*e);
        bool replaced = false;
        for (const auto& [name, value] : env)
            replaced |=
                entry.starts_with(name) && entry.size() > name.size() && entry[name.size()] == '=';
        if (!replaced)
            setup.envp.push_back(*e);
    }
    for (size_t i = 3; i < strings.size(); ++i)
        setup.envp.push_back(strings[i].data());
    setup.envp.push_back(nullptr);
    setup.timeout = timeout;

    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("pipe: {}", std::strerror(errno)));
    Hook hook;
    hook.m_result.reset(fds[0]);
    util::UniqueFd write_end(fds[1]);
    setup.result_fd = fds[1];
    hook.m_deadline = Clock::now() + timeout;
    // A copy of redlock with no exit signal: a "clone child", as the watchdog is (fork(2)
    // would make a child that waitpid(-1) waits for). No CLONE_VM: the child returns here
    // on its own copy of this stack, as from fork.
    const long pid = ::syscall(SYS_clone, 0UL, nullptr, nullptr, nullptr, 0UL);
    if (pid == 0)
        run_hook(setup);
    if (pid < 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("clone: {}", std::strerror(errno)));
    hook.m_pid = static_cast<pid_t>(pid);
    return hook;
}

std::optional<HookEnd> Hook::wait(Clock::time_point until, int interrupt_fd) {
    if (!m_result)
        return std::nullopt;
    for (;;) {
        pollfd fds[2] = {{m_result.get(), POLLIN, 0}, {interrupt_fd, POLLIN, 0}};
        const auto now = Clock::now();
        const int rc = ::poll(fds, 2, util::poll_timeout_ms(now, until));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0 || (fds[1].revents != 0 && fds[0].revents == 0))
            return std::nullopt;
        Message m{static_cast<int>(HookEnd::How::timed_out), 0};
        const ssize_t n = ::read(m_result.get(), &m, sizeof m);
        m_result.reset();
        // The runner writes its message last and exits: reaped at once.
        int status = 0;
        while (::waitpid(m_pid, &status, __WALL) < 0 && errno == EINTR) {
        }
        if (n != static_cast<ssize_t>(sizeof m))
            return HookEnd{HookEnd::How::timed_out, 0}; // killed before it could say
        return HookEnd{static_cast<HookEnd::How>(m.how), m.code};
    }
}

} // namespace redlock::process
