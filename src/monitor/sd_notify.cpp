#include "monitor/sd_notify.hpp"

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "util/format.hpp"
#include "util/text.hpp"

namespace redlock::monitor {

namespace {

// The socket address for $NOTIFY_SOCKET, and its length; nullopt when it is not one.
std::optional<std::pair<sockaddr_un, socklen_t>> unix_address(std::string_view name) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (name.size() < 2 || name.size() >= sizeof addr.sun_path ||
        (name[0] != '/' && name[0] != '@'))
        return std::nullopt;
    std::memcpy(addr.sun_path, name.data(), name.size());
    if (name[0] == '@')
        addr.sun_path[0] = '\0'; // abstract: no trailing NUL counted in the length
    auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    if (name[0] == '/')
        ++length;
    return std::pair{addr, length};
}

} // namespace

std::optional<NotifySocket> NotifySocket::from_environment(std::string& why_not) {
    why_not.clear();
    const char* name = std::getenv("NOTIFY_SOCKET");
    if (name == nullptr || *name == '\0')
        return std::nullopt;
    NotifySocket socket;
    socket.m_address = name;
    auto addr = unix_address(name);
    if (!addr) {
        why_not = util::format("NOTIFY_SOCKET '{}' is not an absolute path or an @abstract "
                               "socket name",
                               socket.m_address);
        return std::nullopt;
    }
    socket.m_fd.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!socket.m_fd) {
        why_not = util::format("socket: {}", std::strerror(errno));
        return std::nullopt;
    }
    socket.m_addr = addr->first;
    socket.m_addr_length = addr->second;
    return socket;
}

std::optional<std::chrono::microseconds> NotifySocket::watchdog_interval(std::string& why_not) {
    why_not.clear();
    const char* usec = std::getenv("WATCHDOG_USEC");
    if (usec == nullptr)
        return std::nullopt;
    if (const char* pid = std::getenv("WATCHDOG_PID"); pid != nullptr && *pid != '\0') {
        long value = 0;
        const std::string_view text(pid);
        if (std::from_chars(text.data(), text.data() + text.size(), value).ptr !=
                text.data() + text.size() ||
            value != ::getpid())
            return std::nullopt; // another process's watchdog
    }
    unsigned long long value = 0;
    const std::string_view text(usec);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value == 0 ||
        value > k_max_watchdog_usec) {
        why_not = util::format("WATCHDOG_USEC '{}' is not a number of microseconds from 1 to {} "
                               "(a century); no WATCHDOG=1 is sent",
                               util::printable(text), k_max_watchdog_usec);
        return std::nullopt;
    }
    return std::chrono::microseconds(static_cast<long long>(value));
}

bool NotifySocket::send(std::string_view message, std::string& error) const {
    for (;;) {
        const ssize_t n = ::sendto(m_fd.get(), message.data(), message.size(), MSG_NOSIGNAL,
                                   reinterpret_cast<const sockaddr*>(&m_addr), m_addr_length);
        if (n >= 0)
            return true;
        if (errno == EINTR)
            continue;
        error = util::format("NOTIFY_SOCKET {}: {}", m_address, std::strerror(errno));
        return false;
    }
}

} // namespace redlock::monitor
