#pragma once
// systemd's notification protocol (sd_notify(3)), spoken directly: one datagram per
// message to the AF_UNIX socket named by $NOTIFY_SOCKET (a path, or "@name" for the
// abstract namespace). Not libsystemd: linked, it and the libraries it needs (lz4, zstd,
// lzma, gcrypt, capabilities) would be loaded and relocated by every run, with or without
// systemd, for what is a sendto() of a few bytes (bench/instructions.sh measures it; see
// docs/operations.md, "Leader election with systemd").

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <sys/un.h>

#include "util/fd.hpp"

namespace redlock::monitor {

class NotifySocket {
  public:
    // The socket of $NOTIFY_SOCKET, or nullopt when it is unset or unusable (why in
    // `why_not`, empty when unset).
    [[nodiscard]] static std::optional<NotifySocket> from_environment(std::string& why_not);
    // $WATCHDOG_USEC when set, valid, and meant for this process ($WATCHDOG_PID unset or
    // ours): how often systemd wants WATCHDOG=1 at the latest. Valid: 1 to
    // k_max_watchdog_usec; why another value is not, in `why_not` (systemd refuses 0 and
    // 2^64-1; a value past a century would overflow the clock's nanoseconds).
    [[nodiscard]] static std::optional<std::chrono::microseconds>
    watchdog_interval(std::string& why_not);
    static constexpr unsigned long long k_max_watchdog_usec = 100ULL * 365 * 24 * 3600 * 1000000;

    // Sends one message ("READY=1\nSTATUS=..."), never blocking. False with why in `error`
    // when it was not sent (the socket gone, its queue full).
    [[nodiscard]] bool send(std::string_view message, std::string& error) const;

    [[nodiscard]] const std::string& address() const { return m_address; }

  private:
    std::string m_address; // as given, for messages
    // Named at every send, as sd_notify does: a socket that systemd made anew (daemon-reexec)
    // is still reached.
    sockaddr_un m_addr{};
    socklen_t m_addr_length = 0;
    util::UniqueFd m_fd;
};

} // namespace redlock::monitor
