#pragma once
// One Redis server, spoken to over a non-blocking socket that we own. hiredis is used only
// for its protocol half (the reply reader), so many servers can be driven from one poll()
// loop with one deadline, and TLS can later sit on the same socket.
//
// A connection carries one request at a time. It connects lazily, pipelines AUTH and SELECT
// in front of the first request, and is dropped after any failure (the next request
// reconnects), so a server that comes back is used again without a restart. A refused AUTH
// (or SELECT) does not stop the server from running the request behind it: the outcome is
// then the refusal, with the request's reply and whether it ran (Outcome::written).
//
// Two kinds of server move under us, and a connection follows them:
// - redis-sentinel://: each connect first asks the sentinels (one after another, the last
//   that answered first) for the master's address, and checks with ROLE, pipelined in the
//   handshake, that it is a master. A failover is followed at the next connect: the old
//   master's connection fails (killed, or a READONLY reply once it is a replica).
// - a Redis Cluster node: a MOVED reply sends the request again to the slot's owner, which
//   later requests go to directly (back to the configured node if it fails); an ASK reply
//   sends it once, after ASKING, to the node importing the slot. At most
//   k_max_redirects per request. TRYAGAIN (a multi-key request on a slot being migrated)
//   sends it again after 10 ms, then 20, 40... 160, while the command timeout lasts.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <sys/socket.h>
#include <vector>

#include "config/config.hpp"
#include "redis/reader.hpp"
#include "redis/reply.hpp"
#include "redis/tls.hpp"
#include "util/clock.hpp"
#include "util/fd.hpp"

namespace redlock::redis {

using Clock = util::BootClock; // counts suspend: see util/clock.hpp

enum class FailureKind {
    connect,   // could not connect (refused, unreachable, name not resolved)
    timeout,   // no answer within the connect or command timeout
    abandoned, // not waited for: the round was decided without this server
    closed,    // the server closed the connection
    io,        // a socket error
    protocol,  // the bytes were not RESP
    auth,      // AUTH refused, or a permission error
    setup,     // SELECT or another handshake step failed
    tls,       // the TLS handshake failed (certificate, name, protocol)
};

struct Failure {
    FailureKind kind;
    std::string detail; // lowercase, never contains a password
};

// What became of one request on one server: a reply (which may be an error reply), or a
// failure to get one.
struct Outcome {
    ReplyPtr reply; // with a failure: the request's reply after a refused AUTH or SELECT
    std::vector<ReplyPtr> trailing; // replies to the commands pipelined after it (WAIT)
    std::optional<Failure> failure;
    Clock::duration latency{};
    // The request left in full (a failure after that may still have run it on the
    // server); false when it failed while connecting or writing, or when its reply after
    // a refused handshake step says that it did not run.
    bool written = true;
};

inline constexpr int k_max_redirects = 5;

class Connection {
  public:
    explicit Connection(config::ServerConfig server);
    Connection(Connection&&) noexcept;
    Connection& operator=(Connection&&) noexcept;
    ~Connection();

    [[nodiscard]] const config::ServerConfig& server() const { return m_server; }
    [[nodiscard]] std::string name() const { return m_server.url.display(); }

    // Sends `command` (RESP-encoded), connecting first if needed. If the server answers
    // NOSCRIPT and `noscript_fallback` is not empty, that is sent in its place.
    void start(std::string command, std::string noscript_fallback, Clock::time_point now);
    // The same with `trailing` more commands pipelined in `command` after the first (as
    // WAIT after a write), whose replies the outcome carries too; no NOSCRIPT fallback.
    void start_pipelined(std::string command, size_t trailing, Clock::time_point now);

    [[nodiscard]] bool busy() const { return m_busy; }
    [[nodiscard]] int fd() const;
    [[nodiscard]] short poll_events() const;
    [[nodiscard]] Clock::time_point deadline() const;
    // A request whose bytes have not all left yet (asking a sentinel, still connecting, in
    // the TLS handshake, or writing).
    [[nodiscard]] bool unsent() const;
    // Where requests go now, when that is not the URL's host: the master the sentinels
    // named, or the cluster node a MOVED reply named ("host:port"); else empty.
    [[nodiscard]] const std::string& current_node() const { return m_node; }

    // Progress after poll() reported `revents` on fd(), or after the deadline passed.
    void on_events(short revents, Clock::time_point now);
    void on_deadline(Clock::time_point now);

    // The result of the last request, once it is no longer busy.
    [[nodiscard]] const std::optional<Outcome>& outcome() const { return m_outcome; }

    // Gives up on a request still in flight: the connection is closed (the command, if
    // already written, still runs on the server) and the outcome becomes a timeout.
    void abandon(Clock::time_point now);

    // Hands the socket (and its TLS session, if any) over once idle, AUTH and SELECT done:
    // a subscription, whose pushes the new owner reads. The next request here connects
    // afresh. An empty fd if not connected.
    struct Stream {
        util::UniqueFd fd;
        std::optional<tls::Session> tls;
    };
    [[nodiscard]] Stream detach();

  private:
    struct Address {
        sockaddr_storage addr;
        socklen_t length;
        std::string host; // as named (URL, sentinel, redirection): the TLS name by default
    };

    static bool lookup(const std::string& host, int port, std::vector<Address>& out);
    void begin(std::string command, std::string noscript_fallback, size_t trailing,
               Clock::time_point now);
    void connect_next_address(Clock::time_point now);
    bool resolve();
    // Connects to m_addresses and sends the handshake, then `command`.
    void open(std::string command, Clock::time_point now);
    void ask_sentinel(Clock::time_point now);
    void on_sentinel_answer(Clock::time_point now);
    void redirect(std::string_view error, Clock::time_point now);
    void retry(Clock::time_point now);
    void finish(Outcome outcome);
    void fail(FailureKind kind, std::string detail, Clock::time_point now);
    void end_in_failure(Outcome outcome, FailureKind kind, std::string detail,
                        Clock::time_point now);
    [[nodiscard]] std::optional<Failure> handshake_failure(const redisReply& reply, bool auth_reply,
                                                           bool role_reply) const;
    void drop();
    void flush(Clock::time_point now);
    void receive(Clock::time_point now);
    bool take_replies(Clock::time_point now);
    void start_tls(Clock::time_point now);
    void continue_tls_handshake(Clock::time_point now);
    // An idle connection that became readable: closed by the server, or junk. Over TLS it
    // may only be the server's post-handshake messages (session tickets): true if usable.
    bool idle_still_usable();
    [[nodiscard]] std::string tls_port_hint() const;
    [[nodiscard]] std::string client_certificate_hint() const;
    void handle_reply(ReplyPtr reply, Clock::time_point now);

    config::ServerConfig m_server;
    std::vector<Address> m_addresses; // resolved once, tried in order
    size_t m_address_index = 0;
    bool m_resolve_failed = false;
    std::string m_node; // see current_node()

    // redis-sentinel://
    std::unique_ptr<Connection> m_sentinel; // the question to a sentinel, while it runs
    size_t m_sentinel_first = 0;            // asked first: the last that answered
    size_t m_sentinel_asked = 0;            // sentinels asked for this connect
    std::string m_sentinel_errors;
    bool m_check_role = false; // the last handshake reply is ROLE's

    // Redis Cluster
    std::string m_request; // as sent, for a redirection to send again
    size_t m_request_trailing = 0;
    int m_redirects = 0;                         // for this request
    bool m_moved = false;                        // m_addresses are a slot owner's, from MOVED
    std::vector<Address> m_ask_home;             // the addresses to go back to after an ASK
    bool m_asking = false;                       // ASKING goes in the handshake
    std::optional<Clock::time_point> m_retry_at; // TRYAGAIN: the request goes again then
    int m_tryagain = 0;                          // TRYAGAIN replies to this request

    util::UniqueFd m_fd;
    std::optional<Reader> m_reader;
    unsigned m_drops = 0; // drop() calls: a reply that made us drop ends the reading
    bool m_connecting = false;
    bool m_answered = false;           // a reply came on this connection
    std::optional<tls::Session> m_tls; // rediss://
    bool m_tls_handshake = false;      // handshake in progress
    short m_tls_wants = 0;             // POLLIN/POLLOUT the session waits for
    bool m_busy = false;
    int m_handshake_replies = 0; // AUTH/SELECT replies still to come before the request's
    bool m_auth_pending = false; // the next of them is AUTH's
    // A handshake step refused: the request pipelined behind it runs on the server all the
    // same, so its reply is awaited (it says whether it ran) before failing with this.
    std::optional<Failure> m_setup_failure;
    std::string m_out; // bytes not yet written
    size_t m_out_offset = 0;
    std::string m_fallback;
    size_t m_trailing = 0;  // replies still to come after the first (start_pipelined)
    ReplyPtr m_first_reply; // the first reply, while they come
    std::vector<ReplyPtr> m_trailing_replies;
    bool m_evalsha_refused = false; // kept across reconnects: the server's ACL decides it
    Clock::time_point m_started{};
    Clock::time_point m_deadline{};
    std::optional<Outcome> m_outcome;
};

} // namespace redlock::redis
