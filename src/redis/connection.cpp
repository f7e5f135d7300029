#include "redis/connection.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/un.h>

#include "util/format.hpp"

namespace redlock::redis {

namespace {

std::string errno_text(int err) {
    return std::strerror(err);
}

// The RESP handshake that precedes the first request on a fresh connection.
std::string handshake(const config::ServerUrl& url, int& replies) {
    std::string out;
    replies = 0;
    if (url.password) {
        if (url.username) {
            std::array<std::string_view, 3> argv{"AUTH", *url.username, *url.password};
            out += encode_command(argv);
        } else {
            std::array<std::string_view, 2> argv{"AUTH", *url.password};
            out += encode_command(argv);
        }
        ++replies;
    }
    if (url.db != 0) {
        auto db = std::to_string(url.db);
        std::array<std::string_view, 2> argv{"SELECT", db};
        out += encode_command(argv);
        ++replies;
    }
    return out;
}

} // namespace

Connection::Connection(config::ServerConfig server) : m_server(std::move(server)) {}

bool Connection::resolve() {
    if (!m_addresses.empty())
        return true;
    // getaddrinfo blocks (a DNS timeout is seconds): it runs once, before the first round.
    // A name that did not resolve then stays failed, so a renewal round never blocks the
    // loop that supervises PROGRAM.
    if (m_resolve_failed)
        return false;
    m_resolve_failed = true;
    const auto& url = m_server.url;
    if (url.is_unix()) {
        sockaddr_un sun{};
        sun.sun_family = AF_UNIX;
        if (url.socket_path.size() >= sizeof(sun.sun_path))
            return false;
        std::memcpy(sun.sun_path, url.socket_path.c_str(), url.socket_path.size() + 1);
        sockaddr_storage ss{};
        std::memcpy(&ss, &sun, sizeof sun);
        m_addresses.push_back(ss);
        m_address_lengths.push_back(static_cast<socklen_t>(sizeof sun));
        m_resolve_failed = false;
        return true;
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = 0;
    addrinfo* found = nullptr;
    auto port = std::to_string(url.port);
    // Numeric hosts are the common case and never touch DNS.
    hints.ai_flags |= AI_NUMERICHOST;
    int rc = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &found);
    if (rc == EAI_NONAME) {
        // A host name: AI_ADDRCONFIG skips address families this host cannot reach. Not
        // for literals, where it only costs a netlink round trip.
        hints.ai_flags = AI_ADDRCONFIG;
        rc = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &found);
    }
    if (rc != 0)
        return false;
    for (auto* ai = found; ai; ai = ai->ai_next) {
        sockaddr_storage ss{};
        std::memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
        m_addresses.push_back(ss);
        m_address_lengths.push_back(ai->ai_addrlen);
    }
    ::freeaddrinfo(found);
    m_resolve_failed = m_addresses.empty();
    return !m_resolve_failed;
}

void Connection::start_pipelined(std::string command, size_t trailing, Clock::time_point now) {
    start(std::move(command), {}, now);
    if (m_busy) // not failed at once
        m_trailing = trailing;
}

void Connection::start(std::string command, std::string noscript_fallback, Clock::time_point now) {
    if (m_busy)
        drop(); // a request still in flight: its reply must not be taken for this one's
    m_outcome.reset();
    m_trailing = 0;
    m_first_reply.reset();
    m_trailing_replies.clear();
    m_busy = true;
    m_started = now;
    m_fallback = std::move(noscript_fallback);
    // EVALSHA was refused here once (an ACL without +evalsha, a renamed command): every
    // script goes as EVAL from then on.
    if (m_evalsha_refused && !m_fallback.empty())
        command = std::exchange(m_fallback, {});

    if (m_fd) {
        // An idle connection has nothing to say; if it is readable, the server closed it
        // (restart, idle timeout) or sent junk: start afresh rather than fail this round.
        pollfd p{m_fd.get(), POLLIN, 0};
        if (::poll(&p, 1, 0) != 0 && !idle_still_usable())
            drop();
    }
    if (m_fd) {
        m_out = std::move(command);
        m_out_offset = 0;
        m_deadline = now + m_server.command_timeout;
        flush(now);
        return;
    }

    if (!resolve()) {
        fail(FailureKind::connect,
             m_server.url.is_unix() ? "socket path too long" : "cannot resolve host name", now);
        return;
    }
    m_out = handshake(m_server.url, m_handshake_replies);
    m_out += command;
    m_out_offset = 0;
    m_address_index = 0;
    connect_next_address(now);
}

void Connection::connect_next_address(Clock::time_point now) {
    int last_error = 0;
    while (m_address_index < m_addresses.size()) {
        const auto& addr = m_addresses[m_address_index];
        socklen_t len = m_address_lengths[m_address_index];
        ++m_address_index;
        util::UniqueFd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!fd) {
            last_error = errno;
            continue;
        }
        if (addr.ss_family != AF_UNIX) {
            int one = 1;
            ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len);
        if (rc != 0 && errno != EINPROGRESS && errno != EAGAIN) {
            last_error = errno;
            continue;
        }
        m_fd = std::move(fd);
        m_reader.reset(redisReaderCreate());
        m_connecting = (rc != 0);
        m_deadline = now + m_server.connect_timeout + m_server.command_timeout;
        if (!m_connecting) {
            if (m_server.url.tls)
                start_tls(now);
            else
                flush(now);
        }
        return;
    }
    fail(FailureKind::connect, errno_text(last_error ? last_error : ECONNREFUSED), now);
}

short Connection::poll_events() const {
    if (m_connecting)
        return POLLOUT;
    if (m_tls_handshake)
        return m_tls_wants;
    short events = static_cast<short>(POLLIN | m_tls_wants);
    if (m_out_offset < m_out.size())
        events |= POLLOUT;
    return events;
}

void Connection::start_tls(Clock::time_point now) {
    auto session = tls::Session::open(m_fd.get(), m_server.tls, m_server.url.host);
    if (!session) {
        fail(FailureKind::tls, session.error().message, now);
        return;
    }
    m_tls = std::move(*session);
    m_tls_handshake = true;
    continue_tls_handshake(now);
}

void Connection::continue_tls_handshake(Clock::time_point now) {
    switch (m_tls->handshake()) {
    case tls::Session::Status::done:
        m_tls_handshake = false;
        m_tls_wants = 0;
        flush(now);
        return;
    case tls::Session::Status::want_read:
        m_tls_wants = POLLIN;
        return;
    case tls::Session::Status::want_write:
        m_tls_wants = POLLOUT;
        return;
    case tls::Session::Status::closed:
    case tls::Session::Status::failed:
        fail(FailureKind::tls, m_tls->error(), now);
        return;
    }
}

bool Connection::idle_still_usable() {
    if (!m_tls)
        return false;
    std::array<char, 512> buffer{};
    size_t n = 0;
    return m_tls->read(buffer.data(), buffer.size(), n) == tls::Session::Status::want_read;
}

void Connection::on_events(short revents, Clock::time_point now) {
    if (!m_busy || !m_fd)
        return;
    if (m_connecting) {
        int err = 0;
        socklen_t len = sizeof err;
        if (::getsockopt(m_fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err == 0 && !(revents & POLLOUT))
            return;
        if (err != 0) {
            m_fd.reset();
            if (m_address_index < m_addresses.size()) {
                connect_next_address(now);
                return;
            }
            fail(FailureKind::connect, errno_text(err), now);
            return;
        }
        m_connecting = false;
        m_deadline = now + m_server.command_timeout;
        if (m_server.url.tls)
            start_tls(now);
        else
            flush(now);
        return;
    }
    if (m_tls_handshake) {
        if (revents & (POLLIN | POLLOUT | POLLHUP | POLLERR))
            continue_tls_handshake(now);
        return;
    }
    // A TLS read may wait to write, and a write to read: either event retries both.
    if (revents & POLLOUT || (m_tls && revents & POLLIN))
        flush(now);
    if (m_busy && (revents & (POLLIN | POLLHUP | POLLERR) || (m_tls && revents & POLLOUT)))
        receive(now);
}

void Connection::flush(Clock::time_point now) {
    while (m_tls && m_out_offset < m_out.size()) {
        size_t n = 0;
        switch (m_tls->write(m_out.data() + m_out_offset, m_out.size() - m_out_offset, n)) {
        case tls::Session::Status::done:
            m_out_offset += n;
            continue;
        case tls::Session::Status::want_read:
        case tls::Session::Status::want_write:
            return; // poll_events asks for both while output is pending
        case tls::Session::Status::closed:
            fail(FailureKind::closed, m_tls->error() + client_certificate_hint(), now);
            return;
        case tls::Session::Status::failed:
            fail(FailureKind::io, m_tls->error() + client_certificate_hint(), now);
            return;
        }
    }
    while (m_out_offset < m_out.size()) {
        ssize_t n = ::send(m_fd.get(), m_out.data() + m_out_offset, m_out.size() - m_out_offset,
                           MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            fail(FailureKind::io, errno_text(errno), now);
            return;
        }
        m_out_offset += static_cast<size_t>(n);
    }
    m_out.clear();
    m_out_offset = 0;
}

void Connection::receive(Clock::time_point now) {
    std::array<char, 16384> buffer{};
    // Over TLS, until the session has nothing more (a record may hold more than was asked
    // for, and poll() cannot see what OpenSSL already read).
    while (m_tls) {
        size_t n = 0;
        auto status = m_tls->read(buffer.data(), buffer.size(), n);
        m_tls_wants = status == tls::Session::Status::want_write ? POLLOUT : 0;
        if (status == tls::Session::Status::want_read || status == tls::Session::Status::want_write)
            break;
        if (status == tls::Session::Status::closed) {
            fail(FailureKind::closed, m_tls->error() + client_certificate_hint(), now);
            return;
        }
        if (status == tls::Session::Status::failed) {
            fail(FailureKind::io, m_tls->error() + client_certificate_hint(), now);
            return;
        }
        if (redisReaderFeed(m_reader.get(), buffer.data(), n) != REDIS_OK) {
            fail(FailureKind::protocol, "protocol error", now);
            return;
        }
    }
    for (;;) {
        if (m_tls)
            break;
        ssize_t n = ::recv(m_fd.get(), buffer.data(), buffer.size(), 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            fail(FailureKind::io, errno_text(errno) + tls_port_hint(), now);
            return;
        }
        if (n == 0) {
            fail(FailureKind::closed, "connection closed by server" + tls_port_hint(), now);
            return;
        }
        if (redisReaderFeed(m_reader.get(), buffer.data(), static_cast<size_t>(n)) != REDIS_OK) {
            fail(FailureKind::protocol, "protocol error", now);
            return;
        }
        if (static_cast<size_t>(n) < buffer.size())
            break;
    }
    while (m_busy) {
        void* raw = nullptr;
        if (redisReaderGetReply(m_reader.get(), &raw) != REDIS_OK) {
            fail(FailureKind::protocol, util::format("protocol error: {}", m_reader->errstr), now);
            return;
        }
        if (!raw)
            return;
        handle_reply(ReplyPtr(static_cast<redisReply*>(raw)), now);
    }
}

void Connection::handle_reply(ReplyPtr reply, Clock::time_point now) {
    m_answered = true;
    if (m_handshake_replies > 0) {
        --m_handshake_replies;
        if (is_error(*reply)) {
            bool auth = is_auth_error(*reply);
            if (auth)
                fail(FailureKind::auth, util::format("authentication refused: {}", text(*reply)),
                     now);
            else
                fail(FailureKind::setup, std::string(text(*reply)), now);
        }
        return;
    }
    if (is_error(*reply) && !m_fallback.empty() && refuses_evalsha(text(*reply)))
        m_evalsha_refused = true;
    if (is_error(*reply) && !m_fallback.empty() &&
        (text(*reply).starts_with("NOSCRIPT") || m_evalsha_refused)) {
        m_out = std::exchange(m_fallback, {});
        m_out_offset = 0;
        flush(now);
        return;
    }
    if (m_first_reply) { // a reply to a command pipelined after the first
        m_trailing_replies.push_back(std::move(reply));
        if (--m_trailing > 0)
            return;
        reply = std::move(m_first_reply);
    } else if (m_trailing > 0) {
        m_first_reply = std::move(reply);
        return;
    }
    Outcome outcome;
    outcome.latency = now - m_started;
    outcome.reply = std::move(reply);
    outcome.trailing = std::move(m_trailing_replies);
    m_trailing_replies.clear();
    finish(std::move(outcome));
}

// A TLS port answers a plain request by closing or resetting the connection (Redis logs
// "wrong version number"), before any reply.
std::string Connection::tls_port_hint() const {
    return m_answered ? std::string() : " before any reply (a TLS port? use rediss://)";
}

// With TLS 1.3 a server checks the client's certificate after the handshake: refused, it
// closes or resets the connection, often before its alert can be read.
std::string Connection::client_certificate_hint() const {
    if (m_answered || !m_tls || m_tls->error().find("client certificate") != std::string::npos)
        return {};
    return m_server.tls.cert_file.empty()
               ? " (does the server require a client certificate? see tls_cert_file)"
               : " (did the server refuse our client certificate?)";
}

void Connection::on_deadline(Clock::time_point now) {
    if (m_busy && now >= m_deadline)
        fail(FailureKind::timeout,
             m_connecting      ? "connect timed out"
             : m_tls_handshake ? "timed out in the TLS handshake (a plain redis:// port?)"
                               : "timed out",
             now);
}

void Connection::abandon(Clock::time_point now) {
    if (m_busy)
        fail(FailureKind::abandoned, "not waited for (the round was decided without it)", now);
}

Connection::Stream Connection::detach() {
    if (m_busy)
        return {};
    Stream stream{std::move(m_fd), std::move(m_tls)};
    drop();
    return stream;
}

void Connection::fail(FailureKind kind, std::string detail, Clock::time_point now) {
    Outcome outcome;
    outcome.written = m_fd && !m_connecting && m_out_offset >= m_out.size();
    drop();
    outcome.latency = now - m_started;
    outcome.failure = Failure{kind, std::move(detail)};
    finish(std::move(outcome));
}

void Connection::finish(Outcome outcome) {
    m_busy = false;
    m_outcome = std::move(outcome);
}

void Connection::drop() {
    m_fd.reset();
    m_reader.reset();
    m_connecting = false;
    m_tls.reset();
    m_answered = false;
    m_tls_handshake = false;
    m_tls_wants = 0;
    m_handshake_replies = 0;
    m_first_reply.reset();
    m_trailing_replies.clear();
    m_out.clear();
    m_out_offset = 0;
}

} // namespace redlock::redis
