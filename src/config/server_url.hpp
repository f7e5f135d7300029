#pragma once
// A Redis server address as users write it:
//   redis://[[user]:password@]host[:port][/db]     (host may be [ipv6])
//   rediss://...                                    (the same, over TLS)
//   unix:///path/redis.sock[?db=N]
//   redis-sentinel://[[user]:password@]host[:port][,host[:port]...][/db]#MASTER
//                                                   (the master the sentinels name; the
//                                                    password is the master's)

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.hpp"

namespace redlock::config {

// A host and port, as in a URL's list of sentinels.
struct Endpoint {
    std::string host;
    int port = 0;
    [[nodiscard]] std::string display() const; // "host:port", "[v6]:port"
};

struct ServerUrl {
    std::string host; // empty for a unix socket and a sentinel-managed master
    int port = 6379;
    std::string socket_path; // non-empty for unix://
    int db = 0;
    std::optional<std::string> username;
    std::optional<std::string> password;
    bool tls = false; // rediss://
    // redis-sentinel://: the sentinels to ask, in the URL's order, and the master's name.
    std::vector<Endpoint> sentinels;
    std::string master_name;

    [[nodiscard]] bool is_unix() const { return !socket_path.empty(); }
    [[nodiscard]] bool is_sentinel() const { return !master_name.empty(); }
    // "127.0.0.1:6379", "[::1]:6379", "unix:/run/redis.sock" or
    // "sentinel:127.0.0.1:26379,127.0.0.1:26380#mymaster", with "/db" (TCP, sentinel) or
    // "?db=N" (unix) when db != 0; never a password.
    [[nodiscard]] std::string display() const;
};

// Keys naming the server a URL points at, so that one server written two ways is seen
// as one: "unix:" + the socket's canonical path (realpath, or lexically normalised when
// it does not exist yet), or "tcp:" + a numeric address + ":" + port (an IP literal in
// its canonical form, an IPv4-mapped IPv6 address as IPv4). A host name gives one key per
// address when `resolve` (getaddrinfo: it can cost a DNS query, so only ask when there is
// something to compare), else, or if it cannot be resolved, the name as written in
// lowercase. A sentinel-managed master is "sentinel:" + each sentinel's key + "#" + the
// master's name. Two URLs name the same server when their keys overlap.
[[nodiscard]] std::vector<std::string> server_identities(const ServerUrl& url, bool resolve);

// Parses a URL; errors are usage errors naming the URL with any password masked.
[[nodiscard]] util::Expected<ServerUrl> parse_server_url(std::string_view url);

// The URL with the password replaced by "***", for messages.
[[nodiscard]] std::string mask_url_password(std::string_view url);

// Where the password sits inside a URL string, if it has one: [offset, offset+length).
// Used to overwrite it in argv so it does not show in the process list.
[[nodiscard]] std::optional<std::pair<size_t, size_t>> find_url_password(std::string_view url);

} // namespace redlock::config
