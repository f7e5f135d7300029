#include "process/watchdog.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "process/child.hpp"
#include "util/format.hpp"

namespace redlock::process {

namespace {

// One message on the pipe: a kind and two times (ns on CLOCK_BOOTTIME) or a pid. Writes of
// this size to a pipe are atomic.
struct Message {
    char kind;
    long long a;
    long long b;
};
constexpr char k_deadlines = 'D'; // a = term_at, b = kill_at
constexpr char k_lost = 'L';      // b = kill_at; redlock sent TERM itself
constexpr char k_group = 'G';     // a = PROGRAM's process group
constexpr char k_done = 'd';

// How long after term_at the watchdog leaves to redlock, which signals at term_at itself
// when it is running: one TERM, not two.
constexpr long long k_term_grace_ns = 100'000'000;

long long now_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_BOOTTIME, &ts);
    return static_cast<long long>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct Watch {
    pid_t redlock;
    pid_t pgid = 0;
    long long term_at = 0; // 0: no TERM to send
    long long kill_at = 0;
    bool killed = false;

    void signal_tree(int sig) const {
        if (pgid > 0)
            ::kill(-pgid, sig);
        pid_t self = ::getpid();
        for (pid_t p : descendants(redlock))
            if (p != self)
                ::kill(p, sig);
    }

    // The next time to act, 0 for none.
    [[nodiscard]] long long next() const {
        if (killed)
            return now_ns() + 50'000'000; // again, for anything forked meanwhile
        if (term_at && (!kill_at || term_at + k_term_grace_ns < kill_at))
            return term_at + k_term_grace_ns;
        return kill_at;
    }

    void act(long long now) {
        if (term_at && now >= term_at + k_term_grace_ns) {
            signal_tree(SIGTERM);
            signal_tree(SIGCONT); // a stopped process acts on TERM only once continued
            term_at = 0;
        }
        if (kill_at && now >= kill_at) {
            signal_tree(SIGKILL);
            killed = true;
        }
        // Nothing left to kill (redlock stopped, PROGRAM gone): wait for redlock quietly.
        if (killed && (pgid <= 0 || ::kill(-pgid, 0) != 0) && descendants(redlock).size() <= 1) {
            killed = false;
            kill_at = 0;
        }
    }
};

// Reads one whole message; false at EOF or on an error.
bool read_message(int fd, Message& m) {
    char buf[sizeof(Message)];
    size_t got = 0;
    while (got < sizeof buf) {
        ssize_t n = ::read(fd, buf + got, sizeof buf - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        got += static_cast<size_t>(n);
    }
    std::memcpy(&m, buf, sizeof m);
    return true;
}

[[noreturn]] void watch(int fd, Watch w) {
    // Own session: neither the terminal's signals nor a kill of redlock's process group
    // reach it. Every catchable signal blocked; no stdio held open for a caller to wait on.
    ::setsid();
    sigset_t all;
    sigfillset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr);
    ::close_range(0, static_cast<unsigned>(fd) - 1, 0);
    ::close_range(static_cast<unsigned>(fd) + 1, ~0U, 0);
    int timer = ::timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC);
    for (;;) {
        long long at = w.next();
        if (timer >= 0) {
            itimerspec spec{};
            spec.it_value.tv_sec = at / 1'000'000'000;
            spec.it_value.tv_nsec = at % 1'000'000'000;
            ::timerfd_settime(timer, TFD_TIMER_ABSTIME, &spec, nullptr); // 0: disarmed
        }
        pollfd fds[2] = {{fd, POLLIN, 0}, {timer, POLLIN, 0}};
        // Without a timerfd, poll's own timeout (CLOCK_MONOTONIC) is the fallback.
        int timeout = -1;
        if (timer < 0 && at)
            timeout = static_cast<int>(std::max(0LL, (at - now_ns()) / 1'000'000 + 1));
        int rc = ::poll(fds, timer >= 0 ? 2 : 1, timeout);
        if (rc < 0 && errno != EINTR)
            break;
        if (fds[0].revents) {
            Message m{};
            if (!read_message(fd, m))
                break; // the pipe closed: redlock died without saying so
            if (m.kind == k_done)
                ::_exit(0);
            if (m.kind == k_deadlines) {
                w.term_at = m.a;
                w.kill_at = m.b;
            } else if (m.kind == k_lost) {
                w.term_at = 0;
                w.kill_at = m.b;
            } else if (m.kind == k_group) {
                w.pgid = static_cast<pid_t>(m.a);
            }
        }
        if (fds[1].revents) {
            std::uint64_t expirations = 0;
            (void)!::read(timer, &expirations, sizeof expirations);
        }
        w.act(now_ns());
    }
    if (w.pgid > 0)
        ::kill(-w.pgid, SIGKILL);
    ::_exit(0);
}

long long to_ns(Watchdog::Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

} // namespace

util::Expected<Watchdog> Watchdog::start(Clock::time_point term_at, Clock::time_point kill_at) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("pipe: {}", std::strerror(errno)));
    util::UniqueFd read_end(fds[0]);
    Watchdog dog;
    dog.m_pipe.reset(fds[1]);
    Watch w{::getpid()};
    w.term_at = to_ns(term_at);
    w.kill_at = to_ns(kill_at);
    // fork() without an exit signal: see the header.
    long pid = ::syscall(SYS_clone, 0L, nullptr, nullptr, nullptr, nullptr);
    if (pid < 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("clone: {}", std::strerror(errno)));
    if (pid == 0) {
        dog.m_pipe.reset();
        watch(read_end.get(), w);
    }
    dog.m_pid = static_cast<pid_t>(pid);
    // A stopped or hung watchdog must never block redlock: a full pipe drops the message.
    ::fcntl(dog.m_pipe.get(), F_SETFL, O_NONBLOCK);
    return dog;
}

void Watchdog::send(char kind, long long a, long long b) {
    if (!m_pipe)
        return;
    Message m{kind, a, b};
    char buf[sizeof m];
    std::memcpy(buf, &m, sizeof m);
    (void)!::write(m_pipe.get(), buf, sizeof buf);
}

void Watchdog::watch_group(pid_t pgid) {
    send(k_group, pgid, 0);
}

void Watchdog::update(Clock::time_point term_at, Clock::time_point kill_at) {
    send(k_deadlines, to_ns(term_at), to_ns(kill_at));
}

void Watchdog::lost(Clock::time_point kill_at) {
    send(k_lost, 0, to_ns(kill_at));
}

void Watchdog::disarm() {
    send(k_done, 0, 0);
    m_pipe.reset();
}

} // namespace redlock::process
