#include "http/server.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <new>
#include <sys/socket.h>

#include "util/format.hpp"
#include "util/symbol.hpp"

namespace redlock::http {

namespace {

// The libmicrohttpd functions redlock calls, looked up once (as redis/tls.cpp does libssl).
struct Api {
    decltype(&::MHD_start_daemon) start_daemon;
    decltype(&::MHD_stop_daemon) stop_daemon;
    decltype(&::MHD_get_daemon_info) daemon_info;
    decltype(&::MHD_get_connection_info) connection_info;
    decltype(&::MHD_get_timeout) get_timeout;
    decltype(&::MHD_run) run;
    // Not the _cls variant: libmicrohttpd 0.9.72 (Debian 11, the release sysroot) lacks it.
    decltype(&::MHD_create_response_from_buffer_with_free_callback) create_response;
    decltype(&::MHD_create_response_from_callback) create_stream;
    decltype(&::MHD_add_response_header) add_header;
    decltype(&::MHD_queue_response) queue_response;
    decltype(&::MHD_destroy_response) destroy_response;
};

util::Expected<const Api*> load() {
    static std::optional<util::Expected<Api>> loaded;
    if (!loaded) {
        void* lib = ::dlopen("libmicrohttpd.so.12", RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            loaded =
                util::fail(util::ErrorKind::unavailable,
                           util::format("the exporter needs libmicrohttpd (libmicrohttpd.so.12, "
                                        "Debian package libmicrohttpd12): {}",
                                        ::dlerror()));
        } else {
            Api api{};
            const bool ok =
                util::find_symbol(lib, "MHD_start_daemon", api.start_daemon) &&
                util::find_symbol(lib, "MHD_stop_daemon", api.stop_daemon) &&
                util::find_symbol(lib, "MHD_get_daemon_info", api.daemon_info) &&
                util::find_symbol(lib, "MHD_get_connection_info", api.connection_info) &&
                util::find_symbol(lib, "MHD_get_timeout", api.get_timeout) &&
                util::find_symbol(lib, "MHD_run", api.run) &&
                util::find_symbol(lib, "MHD_create_response_from_buffer_with_free_callback",
                                  api.create_response) &&
                util::find_symbol(lib, "MHD_create_response_from_callback", api.create_stream) &&
                util::find_symbol(lib, "MHD_add_response_header", api.add_header) &&
                util::find_symbol(lib, "MHD_queue_response", api.queue_response) &&
                util::find_symbol(lib, "MHD_destroy_response", api.destroy_response);
            if (ok)
                loaded = api;
            else
                loaded = util::fail(util::ErrorKind::unavailable,
                                    util::format("libmicrohttpd.so.12 lacks a function redlock "
                                                 "needs: {}",
                                                 ::dlerror()));
        }
    }
    if (!*loaded)
        return std::unexpected(loaded->error());
    return &**loaded;
}

struct Address {
    sockaddr_storage addr{};
    socklen_t length = 0;
};

// "HOST:PORT" or "[V6]:PORT" into a socket address (HOST an IP address or a name).
util::Expected<Address> parse_listen(std::string_view listen) {
    auto bad = [&](std::string_view why) {
        return util::fail(util::ErrorKind::usage,
                          util::format("invalid --listen '{}': {}", listen, why));
    };
    std::string_view host, port;
    if (listen.starts_with('[')) {
        const size_t close = listen.find(']');
        if (close == std::string_view::npos || listen.substr(close + 1, 1) != ":")
            return bad("expected [ADDRESS]:PORT");
        host = listen.substr(1, close - 1);
        port = listen.substr(close + 2);
    } else {
        const size_t colon = listen.rfind(':');
        if (colon == std::string_view::npos || colon == 0 ||
            listen.substr(0, colon).find(':') != std::string_view::npos)
            return bad("expected ADDRESS:PORT");
        host = listen.substr(0, colon);
        port = listen.substr(colon + 1);
    }
    unsigned number = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || number > 65535)
        return bad("the port is a number from 0 to 65535");
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string host_text(host);
    const std::string port_text(port);
    if (int rc = ::getaddrinfo(host_text.c_str(), port_text.c_str(), &hints, &found);
        rc != 0 || !found)
        return bad(util::format("cannot resolve '{}': {}", host_text, ::gai_strerror(rc)));
    Address out;
    std::memcpy(&out.addr, found->ai_addr, found->ai_addrlen);
    out.length = found->ai_addrlen;
    ::freeaddrinfo(found);
    return out;
}

std::string describe(const sockaddr_storage& addr) {
    char text[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET6) {
        const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
        ::inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof text);
        return util::format("[{}]:{}", text, ntohs(a.sin6_port));
    }
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
    return util::format("{}:{}", text, ntohs(a.sin_port));
}

} // namespace

struct Server::Daemon {
    static constexpr size_t k_buffer = 256 * 1024;

    const Api* api = nullptr;
    MHD_Daemon* daemon = nullptr;
    Handler handler;
    int epoll_fd = -1;

    // Every open connection: its socket, and since when it waits for a request's headers
    // (from its start, or from the end of its last response; nullopt while a request is
    // answered). libmicrohttpd's own timeout is an idle one, which a byte now and then
    // defeats: a connection that has not sent a request's headers within k_header_time, or
    // the oldest of those waiting when a connection comes past k_connections, is shut down
    // here (shutdown(2), not close: the socket stays the library's to close, on the hang-up
    // it then reads).
    struct Open {
        int fd = -1;
        std::optional<util::BootClock::time_point> waiting_since;
        bool shut = false;
    };
    std::map<MHD_Connection*, Open> open;

    ~Daemon() {
        if (daemon)
            api->stop_daemon(daemon);
    }

    static void shut(Open& c) {
        ::shutdown(c.fd, SHUT_RDWR);
        c.shut = true;
    }

    // The earliest header deadline of the connections waiting for one.
    [[nodiscard]] std::optional<util::BootClock::time_point> next_deadline() const {
        std::optional<util::BootClock::time_point> next;
        for (const auto& [_, c] : open)
            if (c.waiting_since && !c.shut && (!next || *c.waiting_since + k_header_time < *next))
                next = *c.waiting_since + k_header_time;
        return next;
    }

    void shut_late(util::BootClock::time_point now) {
        for (auto& [_, c] : open)
            if (c.waiting_since && !c.shut && *c.waiting_since + k_header_time <= now)
                shut(c);
    }

    static void on_connection(void* cls, MHD_Connection* connection, void** /*context*/,
                              MHD_ConnectionNotificationCode code) noexcept {
        auto& self = *static_cast<Daemon*>(cls);
        if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
            self.open.erase(connection);
            return;
        }
        const MHD_ConnectionInfo* info =
            self.api->connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        try {
            self.open[connection] = Open{info ? info->connect_fd : -1, util::BootClock::now()};
        } catch (...) {
            if (info)
                ::shutdown(info->connect_fd, SHUT_RDWR);
            return;
        }
        // Past the limit, the connection that has waited longest for its request's headers
        // gives way: idle half-requests cannot keep a scrape out.
        size_t live = 0;
        Open* oldest = nullptr;
        for (auto& [c, o] : self.open) {
            live += !o.shut;
            if (c != connection && !o.shut && o.fd >= 0 && o.waiting_since &&
                (!oldest || *o.waiting_since < *oldest->waiting_since))
                oldest = &o;
        }
        if (live > k_connections && oldest)
            shut(*oldest);
    }

    static void on_completed(void* cls, MHD_Connection* connection, void** /*context*/,
                             MHD_RequestTerminationCode /*code*/) noexcept {
        auto& self = *static_cast<Daemon*>(cls);
        if (auto it = self.open.find(connection); it != self.open.end())
            it->second.waiting_since = util::BootClock::now();
    }

    // libmicrohttpd's access handler: every GET and HEAD answered at its first call (no
    // body to wait for), anything else refused. Nothing may be thrown through C.
    // A body in a buffer of its own, freed by the daemon once sent (the free callback gets
    // the buffer itself).
    static MHD_Response* buffer(Daemon& self, const std::string& text) {
        void* body = std::malloc(text.size() + 1);
        if (!body)
            return nullptr;
        std::memcpy(body, text.data(), text.size());
        MHD_Response* r =
            self.api->create_response(text.size(), body, [](void* b) { std::free(b); });
        if (!r)
            std::free(body);
        return r;
    }

    // A body written as the client reads it: the writer's pieces are handed over as much
    // as the connection's buffer takes at a time (a chunk of up to k_buffer), so that at
    // most that and a piece are held.
    struct Stream {
        BodyWriter writer;
        std::string pending;
        size_t sent = 0; // of `pending`
        bool more = true;
    };

    static ssize_t read_stream(void* cls, uint64_t /*pos*/, char* buf, size_t max) noexcept {
        auto& s = *static_cast<Stream*>(cls);
        try {
            if (s.pending.size() - s.sent < max && s.more) {
                s.pending.erase(0, s.sent);
                s.sent = 0;
                s.more = s.writer(s.pending, max);
            }
        } catch (...) {
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        const size_t n = std::min(max, s.pending.size() - s.sent);
        if (n == 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
        std::memcpy(buf, s.pending.data() + s.sent, n);
        s.sent += n;
        return static_cast<ssize_t>(n);
    }

    static MHD_Response* stream(Daemon& self, BodyWriter writer) {
        auto* s = new (std::nothrow) Stream{std::move(writer), {}, 0, true};
        if (!s)
            return nullptr;
        MHD_Response* r =
            self.api->create_stream(MHD_SIZE_UNKNOWN, k_buffer, &read_stream, s,
                                    [](void* cls) { delete static_cast<Stream*>(cls); });
        if (!r)
            delete s;
        return r;
    }

    static MHD_Result on_request(void* cls, MHD_Connection* connection, const char* url,
                                 const char* method, const char* /*version*/,
                                 const char* /*upload_data*/, size_t* upload_size,
                                 void** /*state*/) noexcept {
        auto& self = *static_cast<Daemon*>(cls);
        if (auto it = self.open.find(connection); it != self.open.end())
            it->second.waiting_since.reset(); // its headers are in
        Response response;
        const std::string_view verb(method);
        try {
            if (verb != "GET" && verb != "HEAD") {
                response = {405,
                            "text/plain; charset=utf-8",
                            "read-only: GET and HEAD only\n",
                            {{"Allow", "GET, HEAD"}},
                            {}};
                *upload_size = 0;
            } else {
                response = self.handler(Request{verb, url});
            }
        } catch (const std::exception& e) {
            response = {500,
                        "text/plain; charset=utf-8",
                        util::format("internal error: {}\n", e.what()),
                        {},
                        {}};
        } catch (...) {
            response = {500, "text/plain; charset=utf-8", "internal error\n", {}, {}};
        }
        MHD_Response* r = response.writer ? stream(self, std::move(response.writer))
                                          : buffer(self, response.body);
        if (!r)
            return MHD_NO;
        self.api->add_header(r, "Content-Type", response.content_type.c_str());
        self.api->add_header(r, "Cache-Control", "no-store");
        self.api->add_header(r, "X-Content-Type-Options", "nosniff");
        for (const auto& [name, value] : response.headers)
            self.api->add_header(r, name.c_str(), value.c_str());
        const MHD_Result queued =
            self.api->queue_response(connection, static_cast<unsigned>(response.status), r);
        self.api->destroy_response(r);
        return queued;
    }
};

util::Expected<std::unique_ptr<Server>> Server::start(std::string_view listen, Handler handler) {
    auto address = parse_listen(listen);
    if (!address)
        return std::unexpected(address.error());
    auto api = load();
    if (!api)
        return std::unexpected(api.error());
    const int family = address->addr.ss_family;
    util::UniqueFd sock(::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    auto failed = [&](std::string_view what) {
        return util::fail(util::ErrorKind::unavailable,
                          util::format("cannot {} {}: {}", what, listen, std::strerror(errno)));
    };
    if (!sock)
        return failed("listen on");
    const int one = 1;
    ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(sock.get(), reinterpret_cast<const sockaddr*>(&address->addr), address->length) != 0)
        return failed("listen on");
    if (::listen(sock.get(), 64) != 0)
        return failed("listen on");
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    ::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&bound), &length);

    std::unique_ptr<Server> server(new Server());
    server->m_address = describe(bound);
    server->m_daemon = std::make_unique<Daemon>();
    Daemon& d = *server->m_daemon;
    d.api = *api;
    d.handler = std::move(handler);
    // External select mode over epoll: MHD_run() from our loop, no thread of its own.
    const unsigned flags = MHD_USE_EPOLL | (family == AF_INET6 ? MHD_USE_IPv6 : 0);
    // The library's limit is twice ours, so that a connection past ours is accepted and
    // can make the oldest one waiting for its headers give way (Daemon::on_connection);
    // its timeout is for the connections being answered, which a slow reader holds. Each
    // connection's memory (k_buffer, mapped: pages are used as written) bounds a chunk of
    // a streamed body: the library's 32 KiB made a scrape of 140 MB four thousand turns of
    // the loop.
    d.daemon = d.api->start_daemon(
        flags, 0, nullptr, nullptr, &Daemon::on_request, &d, MHD_OPTION_LISTEN_SOCKET, sock.get(),
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, Daemon::k_buffer, MHD_OPTION_CONNECTION_LIMIT,
        static_cast<unsigned>(2 * k_connections), MHD_OPTION_CONNECTION_TIMEOUT, 30U,
        MHD_OPTION_NOTIFY_CONNECTION, &Daemon::on_connection, &d, MHD_OPTION_NOTIFY_COMPLETED,
        &Daemon::on_completed, &d, MHD_OPTION_END);
    if (!d.daemon)
        return util::fail(util::ErrorKind::internal,
                          util::format("libmicrohttpd could not serve on {}", server->m_address));
    (void)sock.release(); // the daemon's now: closed when it stops
    const MHD_DaemonInfo* info = d.api->daemon_info(d.daemon, MHD_DAEMON_INFO_EPOLL_FD);
    if (!info)
        return util::fail(util::ErrorKind::internal, "libmicrohttpd gave no epoll fd");
    d.epoll_fd = info->epoll_fd;
    return server;
}

Server::~Server() = default;

int Server::fd() const {
    return m_daemon->epoll_fd;
}

std::optional<util::BootClock::time_point> Server::deadline() const {
    auto next = m_daemon->next_deadline();
    MHD_UNSIGNED_LONG_LONG ms = 0;
    if (m_daemon->api->get_timeout(m_daemon->daemon, &ms) == MHD_YES) {
        // (Work to do at once is due before the caller's "now", not a millisecond after.)
        const auto library =
            ms == 0 ? util::BootClock::time_point{}
                    : util::BootClock::now() +
                          std::chrono::milliseconds(std::min<MHD_UNSIGNED_LONG_LONG>(ms, 60'000));
        next = next ? std::min(*next, library) : library;
    }
    return next;
}

bool Server::busy() const {
    MHD_UNSIGNED_LONG_LONG ms = 0;
    return m_daemon->api->get_timeout(m_daemon->daemon, &ms) == MHD_YES && ms == 0;
}

void Server::run() {
    // (The hang-up of a connection shut down now is read by the run that follows.)
    m_daemon->shut_late(util::BootClock::now());
    (void)m_daemon->api->run(m_daemon->daemon);
}

std::string html_escape(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&quot;";
            break;
        case '\'':
            out += "&#39;";
            break;
        default:
            out.push_back(c);
        }
    }
    return out;
}

} // namespace redlock::http
