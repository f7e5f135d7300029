#include "config/server_url.hpp"

#include <arpa/inet.h>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <climits>

#include "util/format.hpp"

namespace redlock::config {

namespace {

using util::ErrorKind;

// sockaddr_un::sun_path holds 108 bytes including the terminating NUL.
constexpr size_t k_max_socket_path = 107;

std::string lowercase(std::string_view s) {
    std::string out(s);
    for (char& c : out)
        if (c >= 'A' && c <= 'Z')
            c = static_cast<char>(c - 'A' + 'a');
    return out;
}

struct Parts {
    std::string scheme;    // lowercased
    std::string_view rest; // after "://"
    size_t rest_offset = 0;
};

std::optional<Parts> split_scheme(std::string_view url) {
    const size_t sep = url.find("://");
    if (sep == std::string_view::npos)
        return std::nullopt;
    return Parts{lowercase(url.substr(0, sep)), url.substr(sep + 3), sep + 3};
}

// Where the user-info part ends ('@'), if there is one. The last '@' is taken, not the first,
// so that a password holding an unescaped '@' or '/' still parses; for unix:// the '@' must
// be followed by the socket's absolute path.
std::optional<size_t> find_userinfo_end(const Parts& parts) {
    const size_t at = parts.scheme == "unix" ? parts.rest.rfind("@/") : parts.rest.rfind('@');
    if (at == std::string_view::npos)
        return std::nullopt;
    return at;
}

class UrlParser {
  public:
    explicit UrlParser(std::string_view url) : m_url(url) {}

    util::Expected<ServerUrl> parse() {
        if (m_url.starts_with("unix:") && !m_url.starts_with("unix://"))
            return parse_unix_path(m_url.substr(5), {}); // the short "unix:/path" form

        const auto parts = split_scheme(m_url);
        if (!parts)
            return error("expected redis://host[:port][/db] or unix:///path/to/redis.sock");
        if (parts->scheme != "redis" && parts->scheme != "rediss" && parts->scheme != "unix" &&
            parts->scheme != "redis-sentinel")
            return error(util::format("unsupported scheme '{}' (expected redis://, rediss://, "
                                      "unix:// or redis-sentinel://)",
                                      parts->scheme));

        std::string_view rest = parts->rest;
        ServerUrl result;
        result.tls = parts->scheme == "rediss";
        if (const auto at = find_userinfo_end(*parts)) {
            if (auto ok = parse_userinfo(rest.substr(0, *at), result); !ok)
                return std::unexpected(ok.error());
            rest = rest.substr(*at + 1);
        }
        if (parts->scheme == "unix")
            return parse_unix_path(rest, std::move(result));
        if (parts->scheme == "redis-sentinel")
            return parse_sentinel(rest, std::move(result));
        return parse_tcp(rest, std::move(result));
    }

  private:
    std::unexpected<util::Error> error(std::string_view what) const {
        return util::fail(ErrorKind::usage, util::format("invalid server url '{}': {}",
                                                         mask_url_password(m_url), what));
    }

    util::Expected<std::string> percent_decode(std::string_view s, std::string_view what) const {
        std::string out;
        out.reserve(s.size());
        for (size_t i = 0; i < s.size(); ++i) {
            if (s[i] != '%') {
                out.push_back(s[i]);
                continue;
            }
            unsigned value = 0;
            const char* first = s.data() + i + 1;
            const char* last = s.data() + std::min(i + 3, s.size());
            auto [end, ec] = std::from_chars(first, last, value, 16);
            if (ec != std::errc{} || end != first + 2)
                return error(util::format("bad percent-encoding in the {}", what));
            out.push_back(static_cast<char>(value));
            i += 2;
        }
        return out;
    }

    util::Expected<void> parse_userinfo(std::string_view info, ServerUrl& result) const {
        const size_t colon = info.find(':');
        const std::string_view user = info.substr(0, colon);
        if (!user.empty()) {
            auto decoded = percent_decode(user, "user name");
            if (!decoded)
                return std::unexpected(decoded.error());
            result.username = std::move(*decoded);
        }
        if (colon != std::string_view::npos && colon + 1 < info.size()) {
            auto decoded = percent_decode(info.substr(colon + 1), "password");
            if (!decoded)
                return std::unexpected(decoded.error());
            result.password = std::move(*decoded);
        }
        return {};
    }

    // host[:port], host in brackets if IPv6.
    util::Expected<Endpoint> parse_endpoint(std::string_view hostport, int default_port) const {
        Endpoint result{{}, default_port};
        std::string_view port;
        bool has_port = false;

        if (hostport.starts_with('[')) {
            const size_t close = hostport.find(']');
            if (close == std::string_view::npos)
                return error("missing ']' after the IPv6 address");
            result.host = hostport.substr(1, close - 1);
            const std::string_view after = hostport.substr(close + 1);
            if (!after.empty()) {
                if (after[0] != ':')
                    return error(util::format("unexpected '{}' after the IPv6 address", after));
                port = after.substr(1);
                has_port = true;
            }
            if (result.host.empty())
                return error("missing host");
            for (char c : result.host)
                if (!is_hex(c) && c != ':' && c != '.')
                    return error(util::format("bad IPv6 address '{}'", result.host));
        } else {
            const size_t colon = hostport.find(':');
            if (colon != std::string_view::npos && hostport.find(':', colon + 1) != hostport.npos)
                return error("an IPv6 address must be in brackets, e.g. redis://[::1]:6379");
            result.host = hostport.substr(0, colon);
            if (colon != std::string_view::npos) {
                port = hostport.substr(colon + 1);
                has_port = true;
            }
            if (result.host.empty())
                return error("missing host");
            for (char c : result.host)
                if (!is_host_char(c))
                    return error(util::format("bad host '{}'", result.host));
        }

        if (has_port) {
            auto number = parse_number(port);
            if (!number || *number < 1 || *number > 65535)
                return error(util::format("bad port '{}'", port));
            result.port = *number;
        }
        return result;
    }

    // "/db" after the host part, if any.
    util::Expected<void> parse_db(std::string_view rest, size_t slash, ServerUrl& result) const {
        if (slash == std::string_view::npos)
            return {};
        const std::string_view db = rest.substr(slash + 1);
        if (!db.empty()) {
            auto number = parse_number(db);
            if (!number)
                return error(util::format("bad database '{}'", db));
            result.db = *number;
        }
        return {};
    }

    util::Expected<ServerUrl> parse_tcp(std::string_view rest, ServerUrl result) const {
        const size_t slash = rest.find('/');
        auto endpoint = parse_endpoint(rest.substr(0, slash), 6379);
        if (!endpoint)
            return std::unexpected(endpoint.error());
        result.host = std::move(endpoint->host);
        result.port = endpoint->port;
        if (auto ok = parse_db(rest, slash, result); !ok)
            return std::unexpected(ok.error());
        return result;
    }

    // host[:port][,host[:port]...][/db]#MASTER, sentinels on port 26379 by default.
    util::Expected<ServerUrl> parse_sentinel(std::string_view rest, ServerUrl result) const {
        const size_t hash = rest.find('#');
        if (hash == std::string_view::npos || hash + 1 == rest.size())
            return error(
                "name the master after '#', e.g. redis-sentinel://127.0.0.1:26379#mymaster");
        result.master_name = rest.substr(hash + 1);
        for (char c : result.master_name)
            if (c <= 0x20 || c >= 0x7f)
                return error("the master's name must be printable, without spaces");
        rest = rest.substr(0, hash);
        const size_t slash = rest.find('/');
        std::string_view hosts = rest.substr(0, slash);
        while (true) {
            const size_t comma = hosts.find(',');
            auto endpoint = parse_endpoint(hosts.substr(0, comma), 26379);
            if (!endpoint)
                return std::unexpected(endpoint.error());
            result.sentinels.push_back(std::move(*endpoint));
            if (comma == std::string_view::npos)
                break;
            hosts = hosts.substr(comma + 1);
        }
        result.port = 0;
        if (auto ok = parse_db(rest, slash, result); !ok)
            return std::unexpected(ok.error());
        return result;
    }

    util::Expected<ServerUrl> parse_unix_path(std::string_view rest, ServerUrl result) const {
        const size_t question = rest.find('?');
        const std::string_view path = rest.substr(0, question);
        if (!path.starts_with('/'))
            return error("the socket path must be absolute, e.g. unix:///run/redis/redis.sock");
        if (path == "/")
            return error("missing socket path");
        if (path.size() > k_max_socket_path)
            return error(
                util::format("the socket path is longer than {} bytes", k_max_socket_path));
        result.socket_path = path;

        if (question != std::string_view::npos) {
            std::string_view query = rest.substr(question + 1);
            while (!query.empty()) {
                const size_t amp = query.find('&');
                const std::string_view param = query.substr(0, amp);
                query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
                if (!param.starts_with("db="))
                    return error(util::format("unknown parameter '{}' (only db=N is supported)",
                                              param.substr(0, param.find('='))));
                auto number = parse_number(param.substr(3));
                if (!number)
                    return error(util::format("bad database '{}'", param.substr(3)));
                result.db = *number;
            }
        }
        return result;
    }

    static std::optional<int> parse_number(std::string_view s) {
        int value = 0;
        if (s.empty() || s[0] < '0' || s[0] > '9')
            return std::nullopt;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
        if (ec != std::errc{} || end != s.data() + s.size())
            return std::nullopt;
        return value;
    }

    static bool is_hex(char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    }
    static bool is_host_char(char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               c == '-' || c == '.' || c == '_';
    }

    std::string_view m_url;
};

} // namespace

std::string Endpoint::display() const {
    const bool ipv6 = host.find(':') != std::string::npos;
    return ipv6 ? util::format("[{}]:{}", host, port) : util::format("{}:{}", host, port);
}

std::string ServerUrl::display() const {
    if (is_unix())
        return db != 0 ? util::format("unix:{}?db={}", socket_path, db)
                       : util::format("unix:{}", socket_path);
    std::string out;
    if (is_sentinel()) {
        out = "sentinel:";
        for (size_t i = 0; i < sentinels.size(); ++i)
            out += (i ? "," : "") + sentinels[i].display();
    } else {
        out = Endpoint{host, port}.display();
    }
    if (db != 0)
        out += "/" + std::to_string(db);
    if (is_sentinel())
        out += "#" + master_name;
    return out;
}

namespace {

// The canonical text of an address: IPv4 dotted quad, IPv6 as inet_ntop writes it, an
// IPv4-mapped IPv6 address as its IPv4 form.
std::string address_text(int family, const void* address) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (family == AF_INET6) {
        const auto* a6 = static_cast<const in6_addr*>(address);
        if (IN6_IS_ADDR_V4MAPPED(a6))
            return address_text(AF_INET, &a6->s6_addr[12]);
    }
    if (::inet_ntop(family, address, buf, sizeof buf) == nullptr)
        return {};
    return buf;
}

std::optional<std::string> numeric_address(const std::string& host) {
    in_addr v4{};
    if (::inet_pton(AF_INET, host.c_str(), &v4) == 1)
        return address_text(AF_INET, &v4);
    in6_addr v6{};
    if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1)
        return address_text(AF_INET6, &v6);
    return std::nullopt;
}

std::vector<std::string> resolved_addresses(const std::string& host) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    std::vector<std::string> out;
    if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0)
        return out;
    for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET)
            out.push_back(address_text(
                AF_INET, &reinterpret_cast<const sockaddr_in*>(ai->ai_addr)->sin_addr));
        else if (ai->ai_family == AF_INET6)
            out.push_back(address_text(
                AF_INET6, &reinterpret_cast<const sockaddr_in6*>(ai->ai_addr)->sin6_addr));
    }
    ::freeaddrinfo(found);
    return out;
}

} // namespace

std::vector<std::string> server_identities(const ServerUrl& url, bool resolve) {
    if (url.is_sentinel()) {
        std::vector<std::string> out;
        for (const auto& sentinel : url.sentinels) {
            ServerUrl one;
            one.host = sentinel.host;
            one.port = sentinel.port;
            for (const auto& id : server_identities(one, resolve))
                out.push_back(util::format("sentinel:{}#{}", id, url.master_name));
        }
        return out;
    }
    if (url.is_unix()) {
        std::error_code error;
        auto path = std::filesystem::weakly_canonical(url.socket_path, error);
        if (error)
            path = std::filesystem::path(url.socket_path).lexically_normal();
        return {"unix:" + path.string()};
    }
    std::vector<std::string> addresses;
    if (auto numeric = numeric_address(url.host))
        addresses.push_back(*numeric);
    else if (resolve)
        addresses = resolved_addresses(url.host);
    if (addresses.empty())
        addresses.push_back(lowercase(url.host));
    std::vector<std::string> out;
    for (const auto& a : addresses)
        out.push_back(util::format("tcp:{}:{}", a, url.port));
    return out;
}

util::Expected<ServerUrl> parse_server_url(std::string_view url) {
    return UrlParser(url).parse();
}

std::string mask_url_password(std::string_view url) {
    std::string out(url);
    if (const auto range = find_url_password(url))
        out.replace(range->first, range->second, "***");
    return out;
}

std::optional<std::pair<size_t, size_t>> find_url_password(std::string_view url) {
    const auto parts = split_scheme(url);
    if (!parts)
        return std::nullopt;
    const auto at = find_userinfo_end(*parts);
    if (!at)
        return std::nullopt;
    const size_t colon = parts->rest.substr(0, *at).find(':');
    if (colon == std::string_view::npos || colon + 1 == *at)
        return std::nullopt;
    return std::pair{parts->rest_offset + colon + 1, *at - colon - 1};
}

} // namespace redlock::config
