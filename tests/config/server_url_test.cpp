#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "config/server_url.hpp"

using redlock::config::find_url_password;
using redlock::config::mask_url_password;
using redlock::config::parse_server_url;
using redlock::config::ServerUrl;
using redlock::util::ErrorKind;

namespace {

ServerUrl parsed(std::string_view url) {
    auto result = parse_server_url(url);
    REQUIRE_MESSAGE(result, result.error().message);
    return *result;
}

std::string error_of(std::string_view url) {
    auto result = parse_server_url(url);
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == ErrorKind::usage);
    return result.error().message;
}

std::string password_at(std::string_view url) {
    const auto range = find_url_password(url);
    REQUIRE(range);
    return std::string(url.substr(range->first, range->second));
}

} // namespace

TEST_CASE("a redis url needs only a host") {
    const auto url = parsed("redis://localhost");
    CHECK(url.host == "localhost");
    CHECK(url.port == 6379);
    CHECK(url.db == 0);
    CHECK_FALSE(url.is_unix());
    CHECK_FALSE(url.username);
    CHECK_FALSE(url.password);
    CHECK(url.display() == "localhost:6379");
}

TEST_CASE("a redis url may give a port and a database") {
    const auto url = parsed("redis://10.0.0.5:6380/3");
    CHECK(url.host == "10.0.0.5");
    CHECK(url.port == 6380);
    CHECK(url.db == 3);
    CHECK(url.display() == "10.0.0.5:6380/3");
    CHECK(parsed("redis://h/").db == 0);
    CHECK(parsed("redis://h:1/0").display() == "h:1");
}

TEST_CASE("a redis url may carry a user and a password") {
    const auto both = parsed("redis://alice:s3cret@db.example.com:6390");
    CHECK(both.username == "alice");
    CHECK(both.password == "s3cret");
    CHECK(both.host == "db.example.com");
    CHECK(both.port == 6390);

    const auto password_only = parsed("redis://:s3cret@h");
    CHECK_FALSE(password_only.username);
    CHECK(password_only.password == "s3cret");

    const auto user_only = parsed("redis://alice@h");
    CHECK(user_only.username == "alice");
    CHECK_FALSE(user_only.password);

    CHECK_FALSE(parsed("redis://alice:@h").password);
}

TEST_CASE("the display of a url never shows the password") {
    CHECK(parsed("redis://alice:s3cret@h:7000/2").display() == "h:7000/2");
}

TEST_CASE("user and password are percent-decoded") {
    const auto url = parsed("redis://al%69ce:p%40ss%3Aw%2Fo%25rd@h");
    CHECK(url.username == "alice");
    CHECK(url.password == "p@ss:w/o%rd");
}

TEST_CASE("an unescaped @ or / in the password still parses") {
    const auto url = parsed("redis://:p@ss/word@h:6380/1");
    CHECK(url.password == "p@ss/word");
    CHECK(url.host == "h");
    CHECK(url.port == 6380);
    CHECK(url.db == 1);
}

TEST_CASE("an ipv6 host is written in brackets") {
    const auto url = parsed("redis://[::1]:6380/2");
    CHECK(url.host == "::1");
    CHECK(url.port == 6380);
    CHECK(url.db == 2);
    CHECK(url.display() == "[::1]:6380/2");
    CHECK(parsed("redis://[fe80::1]").display() == "[fe80::1]:6379");
}

TEST_CASE("a unix url names an absolute socket path") {
    const auto url = parsed("unix:///run/redis/redis.sock");
    CHECK(url.is_unix());
    CHECK(url.socket_path == "/run/redis/redis.sock");
    CHECK(url.host.empty());
    CHECK(url.db == 0);
    CHECK(url.display() == "unix:/run/redis/redis.sock");
}

TEST_CASE("a unix url takes the database as ?db=N") {
    const auto url = parsed("unix:///tmp/r.sock?db=4");
    CHECK(url.socket_path == "/tmp/r.sock");
    CHECK(url.db == 4);
    CHECK(url.display() == "unix:/tmp/r.sock?db=4");
}

TEST_CASE("a unix url may carry a user and a password") {
    const auto url = parsed("unix://bob:pw@/tmp/r.sock");
    CHECK(url.username == "bob");
    CHECK(url.password == "pw");
    CHECK(url.socket_path == "/tmp/r.sock");
}

TEST_CASE("the short unix:/path form that display() prints is accepted") {
    CHECK(parsed("unix:/tmp/r.sock").socket_path == "/tmp/r.sock");
    CHECK(parsed("unix:/tmp/r.sock?db=2").db == 2);
}

TEST_CASE("the scheme is case-insensitive") {
    CHECK(parsed("REDIS://h").host == "h");
}

TEST_CASE("a bad port is refused with the url, password masked") {
    CHECK(error_of("redis://:secret@h:x") == "invalid server url 'redis://:***@h:x': bad port 'x'");
    CHECK(error_of("redis://h:0") == "invalid server url 'redis://h:0': bad port '0'");
    CHECK(error_of("redis://h:65536") == "invalid server url 'redis://h:65536': bad port '65536'");
    CHECK(error_of("redis://h:") == "invalid server url 'redis://h:': bad port ''");
    CHECK(error_of("redis://h:-1") == "invalid server url 'redis://h:-1': bad port '-1'");
    CHECK(error_of("redis://[::1]:x") == "invalid server url 'redis://[::1]:x': bad port 'x'");
}

TEST_CASE("a bad database is refused") {
    CHECK(error_of("redis://h/x") == "invalid server url 'redis://h/x': bad database 'x'");
    CHECK(error_of("redis://h/-1") == "invalid server url 'redis://h/-1': bad database '-1'");
    CHECK(error_of("redis://h/1/2") == "invalid server url 'redis://h/1/2': bad database '1/2'");
    CHECK(error_of("unix:///s?db=x") == "invalid server url 'unix:///s?db=x': bad database 'x'");
    CHECK(error_of("unix:///s?timeout=3") ==
          "invalid server url 'unix:///s?timeout=3': unknown parameter 'timeout' (only db=N is "
          "supported)");
}

TEST_CASE("rediss is redis over tls, with the same parts") {
    auto url = parsed("rediss://locker:pw@h:6380/2");
    CHECK(url.tls);
    CHECK(url.host == "h");
    CHECK(url.port == 6380);
    CHECK(url.db == 2);
    CHECK(url.username == "locker");
    CHECK(url.password == "pw");
    CHECK(parsed("rediss://h").port == 6379);
    CHECK_FALSE(parsed("redis://h").tls);
    CHECK(error_of("rediss://:pw@h:x") == "invalid server url 'rediss://:***@h:x': bad port 'x'");
}

TEST_CASE("a sentinel url lists sentinels, port 26379 by default, and names the master") {
    auto url = parsed("redis-sentinel://:pw@10.0.0.1,10.0.0.2:26380,[::1]/2#orders");
    CHECK(url.is_sentinel());
    CHECK(url.master_name == "orders");
    REQUIRE(url.sentinels.size() == 3);
    CHECK(url.sentinels[0].host == "10.0.0.1");
    CHECK(url.sentinels[0].port == 26379);
    CHECK(url.sentinels[1].port == 26380);
    CHECK(url.sentinels[2].host == "::1");
    CHECK(url.db == 2);
    CHECK(url.password == "pw"); // the master's
    CHECK(url.display() == "sentinel:10.0.0.1:26379,10.0.0.2:26380,[::1]:26379/2#orders");
    CHECK_FALSE(parsed("redis://h").is_sentinel());
}

TEST_CASE("a sentinel url without a master or with a bad sentinel is refused") {
    CHECK(error_of("redis-sentinel://h") ==
          "invalid server url 'redis-sentinel://h': name the master after '#', e.g. "
          "redis-sentinel://127.0.0.1:26379#mymaster");
    CHECK(error_of("redis-sentinel://h#") ==
          "invalid server url 'redis-sentinel://h#': name the master after '#', e.g. "
          "redis-sentinel://127.0.0.1:26379#mymaster");
    CHECK(error_of("redis-sentinel://h,:1#m") ==
          "invalid server url 'redis-sentinel://h,:1#m': missing host");
    CHECK(error_of("redis-sentinel://h:0#m") ==
          "invalid server url 'redis-sentinel://h:0#m': bad port '0'");
}

TEST_CASE("two sentinel urls sharing a sentinel and the master are one server") {
    using redlock::config::server_identities;
    auto a = server_identities(parsed("redis-sentinel://127.0.0.1,10.0.0.9#m"), false);
    auto b = server_identities(parsed("redis-sentinel://127.0.0.1:26379#m"), false);
    auto c = server_identities(parsed("redis-sentinel://127.0.0.1#other"), false);
    CHECK(std::ranges::find(a, b[0]) != a.end());
    CHECK(std::ranges::find(a, c[0]) == a.end());
}

TEST_CASE("an unknown scheme is named together with the accepted ones") {
    CHECK(error_of("http://h") ==
          "invalid server url 'http://h': unsupported scheme 'http' (expected redis://, rediss://, "
          "unix:// or redis-sentinel://)");
    CHECK(error_of("localhost:6379") ==
          "invalid server url 'localhost:6379': expected redis://host[:port][/db] or "
          "unix:///path/to/redis.sock");
    CHECK(error_of("") == "invalid server url '': expected redis://host[:port][/db] or "
                          "unix:///path/to/redis.sock");
}

TEST_CASE("a host is required and must look like one") {
    CHECK(error_of("redis://") == "invalid server url 'redis://': missing host");
    CHECK(error_of("redis://:pw@:6379") == "invalid server url 'redis://:***@:6379': missing host");
    CHECK(error_of("redis://a b") == "invalid server url 'redis://a b': bad host 'a b'");
    CHECK(error_of("redis://::1") ==
          "invalid server url 'redis://::1': an IPv6 address must be in brackets, e.g. "
          "redis://[::1]:6379");
    CHECK(error_of("redis://[::1") ==
          "invalid server url 'redis://[::1': missing ']' after the IPv6 address");
    CHECK(error_of("redis://[]") == "invalid server url 'redis://[]': missing host");
}

TEST_CASE("a unix socket path must be absolute and fit in sockaddr_un") {
    CHECK(error_of("unix://run/redis.sock") ==
          "invalid server url 'unix://run/redis.sock': the socket path must be absolute, e.g. "
          "unix:///run/redis/redis.sock");
    CHECK(error_of("unix:///") == "invalid server url 'unix:///': missing socket path");
    const std::string long_path = "unix:///" + std::string(107, 'a');
    CHECK(error_of(long_path) ==
          "invalid server url '" + long_path + "': the socket path is longer than 107 bytes");
}

TEST_CASE("a bad percent escape is refused without showing the password") {
    CHECK(error_of("redis://:pa%zzss@h") ==
          "invalid server url 'redis://:***@h': bad percent-encoding in the password");
    CHECK(error_of("redis://u%4:pw@h") ==
          "invalid server url 'redis://u%4:***@h': bad percent-encoding in the user name");
}

TEST_CASE("mask_url_password replaces only the password") {
    CHECK(mask_url_password("redis://alice:s3cret@h:6379/1") == "redis://alice:***@h:6379/1");
    CHECK(mask_url_password("redis://:s3cret@h") == "redis://:***@h");
    CHECK(mask_url_password("redis://alice@h") == "redis://alice@h");
    CHECK(mask_url_password("redis://h") == "redis://h");
    CHECK(mask_url_password("unix://:pw@/tmp/s") == "unix://:***@/tmp/s");
    CHECK(mask_url_password("ftp://u:pw@h") == "ftp://u:***@h");
}

TEST_CASE("find_url_password gives the byte range of the raw password") {
    CHECK(find_url_password("redis://alice:s3cret@h") == std::pair<size_t, size_t>{14, 6});
    CHECK(password_at("redis://:p%40ss@h") == "p%40ss");
    CHECK(password_at("redis://:p@ss/word@h/1") == "p@ss/word");
    CHECK(password_at("unix://u:pw@/tmp/s?db=1") == "pw");
    CHECK_FALSE(find_url_password("redis://alice@h"));
    CHECK_FALSE(find_url_password("redis://alice:@h"));
    CHECK_FALSE(find_url_password("redis://h:6379"));
    CHECK_FALSE(find_url_password("unix:/tmp/s"));
}

namespace {

std::vector<std::string> identities(std::string_view url, bool resolve = false) {
    auto parsed = redlock::config::parse_server_url(url);
    REQUIRE(parsed);
    return redlock::config::server_identities(*parsed, resolve);
}

} // namespace

TEST_CASE("one address written two ways has one identity") {
    using V = std::vector<std::string>;
    CHECK(identities("redis://[::1]:7395") == V{"tcp:::1:7395"});
    CHECK(identities("redis://[0:0:0:0:0:0:0:1]:7395") == V{"tcp:::1:7395"});
    CHECK(identities("redis://[::FFFF:127.0.0.1]:7395") == V{"tcp:127.0.0.1:7395"});
    CHECK(identities("redis://127.0.0.1") == V{"tcp:127.0.0.1:6379"});
    CHECK(identities("redis://127.0.0.1:7396") != identities("redis://127.0.0.1:7395"));
    // Without resolving, a name is only itself (lowercased).
    CHECK(identities("redis://LocalHost:7395") == V{"tcp:localhost:7395"});
}

TEST_CASE("a host name is resolved to its addresses when asked") {
    auto keys = identities("redis://localhost:7395", true);
    CHECK(std::ranges::find(keys, "tcp:127.0.0.1:7395") != keys.end());
    auto unknown = identities("redis://no-such-host.invalid:7395", true);
    CHECK(unknown == std::vector<std::string>{"tcp:no-such-host.invalid:7395"});
}

TEST_CASE("a socket path is compared in canonical form") {
    namespace fs = std::filesystem;
    std::string pattern = (fs::temp_directory_path() / "redlock-url-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    const fs::path dir = fs::canonical(pattern);
    fs::create_directory(dir / "sub");
    fs::create_directory_symlink(dir, dir / "link");
    const auto expected = std::vector<std::string>{"unix:" + (dir / "r.sock").string()};
    CHECK(identities("unix://" + (dir / "r.sock").string()) == expected);
    CHECK(identities("unix://" + (dir / "sub/../r.sock").string()) == expected);
    CHECK(identities("unix://" + (dir / "link/r.sock").string()) == expected);
    CHECK(identities("unix://" + (dir / "./sub//../r.sock").string()) == expected);
    fs::remove_all(dir);
}
