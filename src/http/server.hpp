#pragma once
// A small read-only HTTP server in the caller's own poll loop: libmicrohttpd does the HTTP
// (parsing, keep-alive, limits), in its "external select" mode over epoll, so that no
// thread is started. The library is loaded when a server starts (dlopen of
// libmicrohttpd.so.12), never by the other commands: `run` starts and runs as if it did not
// exist, and the binary depends on libc alone. Knows nothing of locks.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/clock.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"

namespace redlock::http {

struct Request {
    std::string_view method; // GET or HEAD: anything else is refused before the handler
    std::string_view path;   // without the query
};

// A body written a piece at a time, as the client reads it, for one too large to hold
// whole: appends to `out` until it holds at least `want` bytes; false once it wrote its last.
using BodyWriter = std::function<bool(std::string& out, size_t want)>;

struct Response {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
    BodyWriter writer; // if set, the body (sent chunked), and `body` is not
};

using Handler = std::function<Response(const Request&)>;

class Server {
  public:
    // A connection must send a request's headers within k_header_time of its start (or of
    // its last response: an idle keep-alive connection is closed then); past k_connections
    // open, the one that has waited longest for its headers is closed for a newcomer.
    static constexpr auto k_header_time = std::chrono::seconds(5);
    static constexpr size_t k_connections = 64;

    // Listens on `listen` ("HOST:PORT", "[V6]:PORT"; port 0 picks one) and answers every
    // GET and HEAD with `handler`. Errors: the address (usage), binding it (unavailable),
    // or the library missing (unavailable, naming the Debian package).
    [[nodiscard]] static util::Expected<std::unique_ptr<Server>> start(std::string_view listen,
                                                                       Handler handler);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // The address it listens on, as "HOST:PORT" (the port it got with 0).
    [[nodiscard]] const std::string& address() const { return m_address; }
    // For the caller's poll loop: an fd to poll for POLLIN, and when to call run() at the
    // latest (nullopt: only when the fd is readable).
    [[nodiscard]] int fd() const;
    [[nodiscard]] std::optional<util::BootClock::time_point> deadline() const;
    // Accepts, reads, answers and writes what can be, without blocking.
    void run();
    // Whether it has something to do at once (a response to write on): the caller's other
    // work can wait.
    [[nodiscard]] bool busy() const;

    struct Daemon;

  private:
    Server() = default;
    std::unique_ptr<Daemon> m_daemon;
    std::string m_address;
};

// `text` as HTML text or a double-quoted attribute value: & < > " ' escaped.
[[nodiscard]] std::string html_escape(std::string_view text);

} // namespace redlock::http
