#include "redis/fanout.hpp"

#include <cerrno>

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

WaitResult wait(std::span<Connection> conns, const std::function<bool()>& decided,
                int interrupt_fd) {
    std::vector<pollfd> fds;
    while (any_busy(conns) && !decided()) {
        fds.clear();
        if (interrupt_fd >= 0)
            fds.push_back(pollfd{interrupt_fd, POLLIN, 0});
        size_t first = fds.size();
        add_pollfds(conns, fds);
        auto now = Clock::now();
        int timeout_ms = 0;
        if (auto d = earliest_deadline(conns); d && *d > now)
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
