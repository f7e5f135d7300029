#include "support/fake_server.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>

namespace redlock::test {

namespace {

constexpr int k_poll_ms = 50; // how often a waiting thread looks at `stopping`

// Waits for `events` on `fd`; false when the server is stopping first, or on an error.
bool wait_for(int fd, short events, const std::atomic<bool>& stopping) {
    while (!stopping) {
        pollfd p{fd, events, 0};
        int rc = ::poll(&p, 1, k_poll_ms);
        if (rc > 0)
            return (p.revents & events) != 0;
        if (rc < 0 && errno != EINTR)
            return false;
    }
    return false;
}

} // namespace

bool FakeServer::Peer::send(std::string_view bytes) const {
    while (!bytes.empty()) {
        if (!wait_for(m_fd, POLLOUT, m_stopping))
            return false;
        ssize_t n = ::send(m_fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        if (n <= 0)
            return false;
        bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
}

FakeServer::FakeServer(Answer answer) : m_answer(std::move(answer)) {
    m_listener.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (!m_listener || ::bind(m_listener.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(m_listener.get(), 16) != 0 ||
        ::getsockname(m_listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
        throw std::runtime_error(std::string("fake server: ") + std::strerror(errno));
    m_port = ntohs(addr.sin_port);
    m_thread = std::thread([this] { serve(); });
}

FakeServer::~FakeServer() {
    m_stopping = true;
    m_thread.join();
}

std::string FakeServer::url() const {
    return "redis://127.0.0.1:" + std::to_string(m_port);
}

void FakeServer::serve() {
    while (wait_for(m_listener.get(), POLLIN, m_stopping)) {
        util::UniqueFd conn(::accept4(m_listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!conn || !wait_for(conn.get(), POLLIN, m_stopping))
            continue;
        std::array<char, 4096> request{};
        if (::recv(conn.get(), request.data(), request.size(), MSG_DONTWAIT) <= 0)
            continue;
        m_answer(Peer(conn.get(), m_stopping));
    }
}

} // namespace redlock::test
