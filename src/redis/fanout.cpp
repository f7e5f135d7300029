#include "redis/fanout.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace redlock::redis {

void add_pollfds(std::span<Connection> conns, std::vector<pollfd>& fds) {
    for (auto& c : conns)
        if (c.busy() && c.fd() >= 0)
            fds.push_back(pollfd{c.fd(), c.poll_events(), 0});
}

void dispatch(std::span<Connection> conns, std::span<const pollfd> fds, Clock::time_point now) {
    size_t i = 0;
    for (auto& c : conns) {
        if (!c.busy() || c.fd() < 0)
            continue;
        if (i < fds.size() && fds[i].fd == c.fd() && fds[i].revents != 0)
            c.on_events(fds[i].revents, now);
        ++i;
    }
    for (auto& c : conns)
        c.on_deadline(now);
}

std::optional<Clock::time_point> earliest_deadline(std::span<const Connection> conns) {
    std::optional<Clock::time_point> earliest;
    for (const auto& c : conns)
        if (c.busy() && (!earliest || c.deadline() < *earliest))
            earliest = c.deadline();
    return earliest;
}

bool any_busy(std::span<const Connection> conns) {
    for (const auto& c : conns)
        if (c.busy())
            return true;
    return false;
}

WaitResult wait(std::span<Connection> conns, const std::function<bool()>& decided, int interrupt_fd,
                const std::optional<Clock::time_point>* recheck_at) {
    std::vector<pollfd> fds;
    while (any_busy(conns) && !decided()) {
        fds.clear();
        if (interrupt_fd >= 0)
            fds.push_back(pollfd{interrupt_fd, POLLIN, 0});
        size_t first = fds.size();
        add_pollfds(conns, fds);
        auto now = Clock::now();
        int timeout_ms = 0;
        auto d = earliest_deadline(conns);
        if (recheck_at && *recheck_at && (!d || **recheck_at < *d))
            d = *recheck_at;
        if (d && *d > now)
            timeout_ms =
                static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(*d - now).count());
        int rc = ::poll(fds.data(), fds.size(), timeout_ms);
        if (rc < 0 && errno != EINTR)
            break;
        if (interrupt_fd >= 0 && rc > 0 && fds[0].revents != 0)
            return WaitResult::interrupted;
        dispatch(conns, std::span<const pollfd>(fds).subspan(first), Clock::now());
    }
    auto now = Clock::now();
    for (auto& c : conns)
        c.abandon(now);
    return WaitResult::decided;
}

} // namespace redlock::redis

namespace redlock::redis {

namespace {

bool unsent(const Connection& c) {
    return c.unsent();
}

// The detached process: nothing of the caller's is kept but the connections it finishes,
// so that it holds no pipe a shell or a log collector waits on, and no lock or watchdog
// fd. It is bounded by the connections' own deadlines, and by an alarm behind them.
[[noreturn]] void finish_and_exit(std::span<Connection> conns) {
    ::setsid(); // no signal from the caller's terminal
    ::prctl(PR_SET_NAME, "redlock-release");
    sigset_t none;
    sigemptyset(&none);
    sigaddset(&none, SIGPIPE); // sends use MSG_NOSIGNAL; a closed /dev/null is no concern
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<int> keep;
    Clock::time_point last = Clock::now();
    for (auto& c : conns) {
        if (unsent(c)) {
            keep.push_back(c.fd());
            last = std::max(last, c.deadline());
        } else {
            c.abandon(Clock::now()); // the caller has its outcome, or waits for it
        }
    }
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd <= 2 && null >= 0; ++fd)
        if (fd != null)
            ::dup2(null, fd);
    std::ranges::sort(keep);
    int from = 3;
    for (int fd : keep) {
        if (fd > from)
            ::close_range(static_cast<unsigned>(from), static_cast<unsigned>(fd - 1), 0);
        from = fd + 1;
    }
    ::close_range(static_cast<unsigned>(from), ~0U, 0);
    // The command timeout starts again once connected, so allow both, and then some.
    auto left = std::chrono::ceil<std::chrono::seconds>(last - Clock::now()).count();
    ::alarm(static_cast<unsigned>(std::max<long long>(left, 0)) * 2 + 5);
    (void)wait(conns, [] { return false; });
    ::_exit(0);
}

} // namespace

size_t finish_unsent_in_background(std::span<Connection> conns) {
    size_t count = static_cast<size_t>(std::ranges::count_if(conns, unsent));
    if (count == 0)
        return 0;
    // Twice forked: the process that finishes is nobody's child (no zombie for a long
    // waiter, nothing for a watchdog that stops redlock's descendants to find).
    pid_t middle = ::fork();
    if (middle == 0) {
        if (::fork() == 0)
            finish_and_exit(conns);
        ::_exit(0);
    }
    if (middle > 0)
        while (::waitpid(middle, nullptr, 0) < 0 && errno == EINTR) {
        }
    auto now = Clock::now();
    for (auto& c : conns)
        if (unsent(c))
            c.abandon(now);
    return middle > 0 ? count : 0;
}

void request_all(std::span<Connection> conns, const std::string& command,
                 const std::string& noscript_fallback) {
    auto now = Clock::now();
    for (auto& c : conns)
        c.start(command, noscript_fallback, now);
    (void)wait(conns, [] { return false; });
}

std::vector<Connection> connect_all(const std::vector<config::ServerConfig>& servers) {
    std::vector<Connection> conns;
    conns.reserve(servers.size());
    for (const auto& s : servers)
        conns.emplace_back(s);
    return conns;
}

} // namespace redlock::redis
