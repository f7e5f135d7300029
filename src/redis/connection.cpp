#include "redis/connection.hpp"

#include <arpa/inet.h>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/un.h>

#include "util/format.hpp"
#include "util/log.hpp"

namespace redlock::redis {

namespace {

std::string errno_text(int err) {
    return std::strerror(err);
}

// The RESP handshake that precedes the first request on a fresh connection: AUTH, SELECT,
// then ASKING (after a cluster's ASK) or ROLE (a master the sentinels named), last.
std::string handshake(const config::ServerUrl& url, bool asking, int& replies) {
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
    if (asking || url.is_sentinel()) {
        std::array<std::string_view, 1> argv{asking ? "ASKING" : "ROLE"};
        out += encode_command(argv);
        ++replies;
    }
    return out;
}

// ROLE's first element: "master", "slave" or "sentinel".
std::string_view role_of(const redisReply& reply) {
    if (reply.type != REDIS_REPLY_ARRAY || reply.elements == 0 ||
        reply.element[0]->type != REDIS_REPLY_STRING)
        return "unknown";
    return text(*reply.element[0]);
}

// A TCP port as a server names one (a redirection, a sentinel's answer): digits only,
// 1-65535. Anything else would be cut down to some other port when connecting.
std::optional<int> port_number(std::string_view digits) {
    int port = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    if (ec != std::errc{} || end != digits.data() + digits.size() || port < 1 || port > 65535)
        return std::nullopt;
    return port;
}

// The host and port of a MOVED or ASK error ("MOVED 3999 127.0.0.1:6381"); an empty host
// (Redis 7 with an unknown preferred endpoint) means the host already connected to.
std::optional<config::Endpoint> redirect_target(std::string_view error, const std::string& host) {
    const size_t first = error.find(' ');
    const size_t second = first == std::string_view::npos ? first : error.find(' ', first + 1);
    if (second == std::string_view::npos)
        return std::nullopt;
    std::string_view target = error.substr(second + 1);
    const size_t colon = target.rfind(':');
    if (colon == std::string_view::npos)
        return std::nullopt;
    const auto port = port_number(target.substr(colon + 1));
    if (!port)
        return std::nullopt;
    std::string_view name = target.substr(0, colon);
    if (name.starts_with('[') && name.ends_with(']'))
        name = name.substr(1, name.size() - 2);
    return config::Endpoint{name.empty() ? host : std::string(name), *port};
}

} // namespace

Connection::Connection(config::ServerConfig server) : m_server(std::move(server)) {}
Connection::Connection(Connection&&) noexcept = default;
Connection& Connection::operator=(Connection&&) noexcept = default;
Connection::~Connection() = default;

bool Connection::lookup(const std::string& host, int port, std::vector<Address>& out) {
    // A dotted IPv4 address, the most common server, without getaddrinfo: the same one
    // address it would give (other literals, "127.1" and IPv6, go through it).
    if (in_addr v4{}; port > 0 && port <= 65535 && ::inet_pton(AF_INET, host.c_str(), &v4) == 1) {
        Address address{};
        auto* sin = reinterpret_cast<sockaddr_in*>(&address.addr);
        sin->sin_family = AF_INET;
        sin->sin_port = htons(static_cast<uint16_t>(port));
        sin->sin_addr = v4;
        address.length = sizeof(sockaddr_in);
        address.host = host;
        out.push_back(address);
        return true;
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST; // numeric hosts, the common case, never touch DNS
    addrinfo* found = nullptr;
    auto service = std::to_string(port);
    int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
    if (rc == EAI_NONAME) {
        // A host name: AI_ADDRCONFIG skips address families this host cannot reach. Not
        // for literals, where it only costs a netlink round trip.
        hints.ai_flags = AI_ADDRCONFIG;
        rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
    }
    if (rc != 0)
        return false;
    for (auto* ai = found; ai; ai = ai->ai_next) {
        Address address{};
        std::memcpy(&address.addr, ai->ai_addr, ai->ai_addrlen);
        address.length = ai->ai_addrlen;
        address.host = host;
        out.push_back(address);
    }
    ::freeaddrinfo(found);
    return !out.empty();
}

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
        Address address{};
        std::memcpy(&address.addr, &sun, sizeof sun);
        address.length = static_cast<socklen_t>(sizeof sun);
        m_addresses.push_back(address);
        m_resolve_failed = false;
        return true;
    }
    m_resolve_failed = !lookup(url.host, url.port, m_addresses);
    return !m_resolve_failed;
}

void Connection::start_pipelined(std::string command, size_t trailing, Clock::time_point now) {
    begin(std::move(command), {}, trailing, now);
}

void Connection::start(std::string command, std::string noscript_fallback, Clock::time_point now) {
    begin(std::move(command), std::move(noscript_fallback), 0, now);
}

void Connection::begin(std::string command, std::string noscript_fallback, size_t trailing,
                       Clock::time_point now) {
    if (m_busy)
        drop(); // a request still in flight: its reply must not be taken for this one's
    m_outcome.reset();
    m_trailing = m_request_trailing = trailing;
    m_first_reply.reset();
    m_trailing_replies.clear();
    m_redirects = 0;
    m_tryagain = 0;
    m_retry_at.reset();
    m_busy = true;
    m_started = now;
    m_fallback = std::move(noscript_fallback);
    // EVALSHA was refused here once (an ACL without +evalsha, a renamed command): every
    // script goes as EVAL from then on.
    if (m_evalsha_refused && !m_fallback.empty())
        command = std::exchange(m_fallback, {});
    m_request = command;

    if (m_fd) {
        // An idle connection has nothing to say; if it is readable, the server closed it
        // (restart, idle timeout) or sent junk: start afresh rather than fail this round.
        // So with bytes left over after the last request's replies.
        pollfd p{m_fd.get(), POLLIN, 0};
        if ((::poll(&p, 1, 0) != 0 && !idle_still_usable()) ||
            (m_reader && m_reader->pending() > 0))
            drop();
    }
    if (m_fd) {
        m_out = std::move(command);
        m_out_offset = 0;
        m_deadline = now + m_server.command_timeout;
        flush(now);
        return;
    }
    if (m_server.url.is_sentinel()) {
        // Each connect asks where the master is now: that is how a failover is followed.
        m_out = std::move(command); // sent once a sentinel answered
        m_sentinel_asked = 0;
        m_sentinel_errors.clear();
        m_node.clear();
        m_addresses.clear();
        ask_sentinel(now);
        return;
    }
    if (!resolve()) {
        fail(FailureKind::connect,
             m_server.url.is_unix() ? "socket path too long" : "cannot resolve host name", now);
        return;
    }
    open(std::move(command), now);
}

void Connection::open(std::string command, Clock::time_point now) {
    m_out = handshake(m_server.url, m_asking, m_handshake_replies);
    m_auth_pending = m_server.url.password.has_value();
    m_check_role = m_server.url.is_sentinel();
    m_out += command;
    m_out_offset = 0;
    m_address_index = 0;
    connect_next_address(now);
}

void Connection::ask_sentinel(Clock::time_point now) {
    const auto& sentinels = m_server.url.sentinels;
    while (m_sentinel_asked < sentinels.size()) {
        const auto& sentinel = sentinels[(m_sentinel_first + m_sentinel_asked) % sentinels.size()];
        ++m_sentinel_asked;
        config::ServerConfig asked;
        asked.url.host = sentinel.host;
        asked.url.port = sentinel.port;
        asked.url.username = m_server.sentinel_username;
        asked.url.password = m_server.sentinel_password;
        asked.connect_timeout = m_server.connect_timeout;
        asked.command_timeout = m_server.command_timeout;
        m_sentinel = std::make_unique<Connection>(std::move(asked));
        std::array<std::string_view, 3> argv{"SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                             m_server.url.master_name};
        m_sentinel->start(encode_command(argv), {}, now);
        if (m_sentinel->busy())
            return;
        on_sentinel_answer(now); // failed at once: the next one
        return;
    }
    m_sentinel.reset();
    fail(FailureKind::connect,
         util::format("no sentinel gave the address of master '{}': {}", m_server.url.master_name,
                      m_sentinel_errors),
         now);
}

void Connection::on_sentinel_answer(Clock::time_point now) {
    const auto sentinel = m_sentinel->name();
    const auto& outcome = *m_sentinel->outcome();
    std::string problem;
    if (outcome.failure) {
        problem = outcome.failure->detail;
    } else if (const auto& reply = *outcome.reply; is_error(reply)) {
        problem = std::string(text(reply));
    } else if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 2 ||
               reply.element[0]->type != REDIS_REPLY_STRING ||
               reply.element[1]->type != REDIS_REPLY_STRING) {
        problem = reply.type == REDIS_REPLY_NIL
                      ? util::format("does not know master '{}'", m_server.url.master_name)
                      : "unexpected reply " + describe(reply);
    } else {
        const auto port = port_number(text(*reply.element[1]));
        const config::Endpoint master{std::string(text(*reply.element[0])), port.value_or(0)};
        if (!port)
            problem = "unexpected port " + describe(*reply.element[1]);
        else if (!lookup(master.host, master.port, m_addresses))
            problem = util::format("names master {} that does not resolve", master.display());
        else {
            m_sentinel_first =
                (m_sentinel_first + m_sentinel_asked - 1) % m_server.url.sentinels.size();
            m_sentinel.reset();
            m_node = master.display();
            util::log::verbose("{}: sentinel {} names {} as master '{}'", name(), sentinel, m_node,
                               m_server.url.master_name);
            open(std::exchange(m_out, {}), now);
            return;
        }
    }
    if (!m_sentinel_errors.empty())
        m_sentinel_errors += "; ";
    m_sentinel_errors += util::format("{}: {}", sentinel, problem);
    ask_sentinel(now);
}

void Connection::connect_next_address(Clock::time_point now) {
    int last_error = 0;
    while (m_address_index < m_addresses.size()) {
        const auto& addr = m_addresses[m_address_index].addr;
        socklen_t len = m_addresses[m_address_index].length;
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
        m_reader.emplace();
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

int Connection::fd() const {
    return m_sentinel ? m_sentinel->fd() : m_fd.get();
}

Clock::time_point Connection::deadline() const {
    if (m_sentinel)
        return m_sentinel->deadline();
    return m_retry_at ? std::min(*m_retry_at, m_deadline) : m_deadline;
}

bool Connection::unsent() const {
    return m_busy && (m_sentinel ||
                      (m_fd && (m_connecting || m_tls_handshake || m_out_offset < m_out.size())));
}

short Connection::poll_events() const {
    if (m_sentinel)
        return m_sentinel->poll_events();
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
    // The name the URL, the sentinels or the cluster's redirection gave this address.
    auto session =
        tls::Session::open(m_fd.get(), m_server.tls, m_addresses[m_address_index - 1].host);
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
    if (m_busy && m_sentinel) {
        m_sentinel->on_events(revents, now);
        if (!m_sentinel->busy())
            on_sentinel_answer(now);
        return;
    }
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
    std::array<char, 16384> buffer; // not zeroed: 16 KB of memset per reply
    // Each read is taken apart into replies before the next: the bytes of a reply that
    // ended no longer count against the reader's limit, and once the request has its
    // replies nothing more is read. So this returns to the poll loop, where deadlines and
    // signals are looked at, after at most the reader's limit of bytes.
    while (m_busy) {
        size_t n = 0;
        if (m_tls) {
            // Over TLS, until the session has nothing more (a record may hold more than was
            // asked for, and poll() cannot see what OpenSSL already read).
            auto status = m_tls->read(buffer.data(), buffer.size(), n);
            m_tls_wants = status == tls::Session::Status::want_write ? POLLOUT : 0;
            if (status == tls::Session::Status::want_read ||
                status == tls::Session::Status::want_write)
                return;
            if (status == tls::Session::Status::closed) {
                fail(FailureKind::closed, m_tls->error() + client_certificate_hint(), now);
                return;
            }
            if (status == tls::Session::Status::failed) {
                fail(FailureKind::io, m_tls->error() + client_certificate_hint(), now);
                return;
            }
        } else {
            ssize_t got = ::recv(m_fd.get(), buffer.data(), buffer.size(), 0);
            if (got < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    return;
                fail(FailureKind::io, errno_text(errno) + tls_port_hint(), now);
                return;
            }
            if (got == 0) {
                fail(FailureKind::closed, "connection closed by server" + tls_port_hint(), now);
                return;
            }
            n = static_cast<size_t>(got);
        }
        if (auto fed = m_reader->feed(std::string_view(buffer.data(), n)); !fed) {
            fail(FailureKind::protocol, "protocol error: " + fed.error(), now);
            return;
        }
        if (!take_replies(now) || (!m_tls && n < buffer.size()))
            return;
    }
}

// The replies read so far, to handle_reply; false once reading must stop: the request has
// its replies, failed, or went elsewhere (a redirection).
bool Connection::take_replies(Clock::time_point now) {
    const unsigned drops = m_drops;
    while (m_busy) {
        auto reply = m_reader->next();
        if (!reply) {
            fail(FailureKind::protocol, "protocol error: " + reply.error(), now);
            return false;
        }
        if (!*reply)
            return true;
        handle_reply(std::move(*reply), now);
        if (m_drops != drops)
            return false;
    }
    return false;
}

void Connection::handle_reply(ReplyPtr reply, Clock::time_point now) {
    m_answered = true;
    if (m_handshake_replies > 0) {
        --m_handshake_replies;
        const bool auth_reply = std::exchange(m_auth_pending, false);
        const bool role_reply = m_handshake_replies == 0 && m_check_role;
        if (!m_setup_failure)
            m_setup_failure = handshake_failure(*reply, auth_reply, role_reply);
        return;
    }
    if (m_setup_failure) {
        // The request's own reply, after a handshake step was refused: the server ran it all
        // the same (as the user the connection was already logged in as, the default user
        // when it needs no password; in database 0), unless the reply says it did not.
        Outcome outcome;
        outcome.written = !(is_error(*reply) && refused_before_running(text(*reply)));
        outcome.reply = std::move(reply);
        auto failure = *std::exchange(m_setup_failure, std::nullopt);
        end_in_failure(std::move(outcome), failure.kind, std::move(failure.detail), now);
        return;
    }
    if (is_error(*reply)) {
        auto error = text(*reply);
        const auto code = error_code(error);
        if (code == ErrorCode::moved || code == ErrorCode::ask) {
            redirect(error, now);
            return;
        }
        // The slot is being migrated and this request's keys are not all on one side yet.
        if (code == ErrorCode::tryagain) {
            const auto delay = std::chrono::milliseconds(10 << std::min(m_tryagain++, 4));
            if (now + delay < m_deadline) {
                m_retry_at = now + delay;
                return;
            }
        }
        // A master demoted to a replica (a failover) refuses writes: a failure, so that
        // the connection is dropped and the next one goes where the master is now.
        if (code == ErrorCode::readonly) {
            fail(FailureKind::setup, util::format("it is a replica now: {}", error), now);
            return;
        }
    }
    if (is_error(*reply) && !m_fallback.empty() && refuses_evalsha(text(*reply)))
        m_evalsha_refused = true;
    if (is_error(*reply) && !m_fallback.empty() &&
        (error_code(text(*reply)) == ErrorCode::noscript || m_evalsha_refused)) {
        m_out = std::exchange(m_fallback, {});
        m_request = m_out;
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

void Connection::retry(Clock::time_point now) {
    util::log::verbose("{}: sending it again (TRYAGAIN: the slot is being migrated)", name());
    m_retry_at.reset();
    m_handshake_replies = 0;
    m_out.clear();
    if (m_asking) { // ASKING holds for one command
        std::array<std::string_view, 1> asking{"ASKING"};
        m_out = encode_command(asking);
        m_handshake_replies = 1;
    }
    m_out += m_request;
    m_out_offset = 0;
    m_trailing = m_request_trailing;
    m_first_reply.reset();
    m_trailing_replies.clear();
    flush(now);
}

void Connection::redirect(std::string_view error, Clock::time_point now) {
    const bool ask = error_code(error) == ErrorCode::ask;
    const auto target = redirect_target(error, m_node.empty() ? m_server.url.host : m_node);
    if (!target) {
        fail(FailureKind::protocol, util::format("unexpected redirection: {}", error), now);
        return;
    }
    if (++m_redirects > k_max_redirects) {
        fail(FailureKind::setup,
             util::format("more than {} cluster redirections (the last: {})", k_max_redirects,
                          error),
             now);
        return;
    }
    std::vector<Address> addresses;
    if (!lookup(target->host, target->port, addresses)) {
        fail(FailureKind::connect,
             util::format("cannot resolve {} (from the cluster's {})", target->display(), error),
             now);
        return;
    }
    util::log::verbose("{}: {} (following the cluster's redirection)", name(), error);
    drop();
    if (ask) { // this request only: the slot is being imported there
        if (m_ask_home.empty())
            m_ask_home = std::exchange(m_addresses, std::move(addresses));
        else
            m_addresses = std::move(addresses);
        m_asking = true;
    } else { // the slot's owner, for this request and the ones after it
        m_addresses = std::move(addresses);
        m_ask_home.clear();
        m_asking = false;
        m_moved = true;
        m_node = target->display();
    }
    m_trailing = m_request_trailing;
    m_first_reply.reset();
    m_trailing_replies.clear();
    open(m_request, now);
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
    if (m_busy && m_sentinel) {
        m_sentinel->on_deadline(now);
        if (!m_sentinel->busy())
            on_sentinel_answer(now);
        return;
    }
    if (m_busy && m_retry_at && now >= *m_retry_at && now < m_deadline) {
        retry(now);
        return;
    }
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

std::optional<Failure> Connection::handshake_failure(const redisReply& reply, bool auth_reply,
                                                     bool role_reply) const {
    if (is_error(reply)) {
        const bool auth = is_auth_error(reply);
        if (auth_reply)
            return Failure{FailureKind::auth,
                           util::format("authentication refused: {}", text(reply))};
        if (role_reply)
            return Failure{auth ? FailureKind::auth : FailureKind::setup,
                           util::format("ROLE refused (a master behind redis-sentinel:// is "
                                        "checked with ROLE): {}",
                                        text(reply))};
        if (auth)
            return Failure{FailureKind::auth,
                           describe_refusal(text(reply), m_server.url.password.has_value())};
        return Failure{FailureKind::setup, std::string(text(reply))};
    }
    if (role_reply && role_of(reply) != "master")
        return Failure{FailureKind::setup,
                       util::format("the sentinels name it master '{}', but it is a {} (ROLE); a "
                                    "failover in progress?",
                                    m_server.url.master_name, role_of(reply))};
    return std::nullopt;
}

void Connection::fail(FailureKind kind, std::string detail, Clock::time_point now) {
    // A handshake step was refused before: that is the cause, what came after it (the
    // connection closed, the timeout) only ended the wait for the request's reply.
    if (m_setup_failure) {
        kind = m_setup_failure->kind;
        detail = std::move(m_setup_failure->detail);
    }
    Outcome outcome;
    outcome.written = m_fd && !m_connecting && m_out_offset >= m_out.size();
    end_in_failure(std::move(outcome), kind, std::move(detail), now);
}

void Connection::end_in_failure(Outcome outcome, FailureKind kind, std::string detail,
                                Clock::time_point now) {
    if (!m_node.empty() && !m_sentinel)
        detail = util::format("{} {}: {}", m_moved ? "node" : "master", m_node, detail);
    // A slot owner learned from MOVED that fails: the next request asks the configured node
    // again, which knows the owner after a cluster failover.
    if (m_moved && kind != FailureKind::abandoned) {
        m_addresses.clear();
        m_moved = false;
        m_node.clear();
    }
    drop();
    outcome.latency = now - m_started;
    outcome.failure = Failure{kind, std::move(detail)};
    finish(std::move(outcome));
}

void Connection::finish(Outcome outcome) {
    m_busy = false;
    m_outcome = std::move(outcome);
    if (!m_ask_home.empty()) { // an ASK target serves one request: back to the owner
        drop();
        m_addresses = std::exchange(m_ask_home, {});
    }
    m_asking = false;
}

void Connection::drop() {
    ++m_drops;
    m_sentinel.reset();
    m_retry_at.reset();
    m_fd.reset();
    m_reader.reset();
    m_connecting = false;
    m_tls.reset();
    m_answered = false;
    m_tls_handshake = false;
    m_tls_wants = 0;
    m_handshake_replies = 0;
    m_auth_pending = false;
    m_setup_failure.reset();
    m_first_reply.reset();
    m_trailing_replies.clear();
    m_out.clear();
    m_out_offset = 0;
}

} // namespace redlock::redis
