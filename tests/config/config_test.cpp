#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include "config/config.hpp"

namespace fs = std::filesystem;
using redlock::config::Config;
using redlock::config::find_config_file;
using redlock::config::load_config;
using redlock::config::Millis;
using redlock::config::parse_config;
using redlock::util::ErrorKind;

namespace {

Config parsed(std::string_view text, const fs::path& source = "config.toml") {
    auto result = parse_config(text, source);
    REQUIRE_MESSAGE(result, result.error().message);
    return *result;
}

std::string error_of(std::string_view text, const fs::path& source = "config.toml") {
    auto result = parse_config(text, source);
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == ErrorKind::config);
    return result.error().message;
}

std::optional<fs::path> found(const std::optional<fs::path>& explicit_path) {
    auto result = find_config_file(explicit_path);
    REQUIRE_MESSAGE(result, result.error().message);
    return *result;
}

// A scratch directory, removed with its content at the end of the test.
class TempDir {
  public:
    TempDir() {
        std::string pattern = (fs::temp_directory_path() / "redlock-config-test-XXXXXX").string();
        REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        m_path = pattern;
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() {
        std::error_code ignored;
        fs::remove_all(m_path, ignored);
    }
    [[nodiscard]] const fs::path& path() const { return m_path; }

    fs::path write(const fs::path& name, std::string_view text, mode_t mode = 0600) const {
        const fs::path file = m_path / name;
        fs::create_directories(file.parent_path());
        {
            std::ofstream out(file, std::ios::binary);
            out << text;
        }
        REQUIRE(::chmod(file.c_str(), mode) == 0);
        return file;
    }

  private:
    fs::path m_path;
};

// Sets or unsets an environment variable for the length of a test, then restores it.
class EnvGuard {
  public:
    explicit EnvGuard(std::string name) : m_name(std::move(name)) {
        if (const char* value = std::getenv(m_name.c_str()))
            m_saved = value;
    }
    EnvGuard(const EnvGuard&) = delete;
    EnvGuard& operator=(const EnvGuard&) = delete;
    ~EnvGuard() {
        if (m_saved)
            ::setenv(m_name.c_str(), m_saved->c_str(), 1);
        else
            ::unsetenv(m_name.c_str());
    }
    void set(const std::string& value) const { ::setenv(m_name.c_str(), value.c_str(), 1); }
    void unset() const { ::unsetenv(m_name.c_str()); }

  private:
    std::string m_name;
    std::optional<std::string> m_saved;
};

// Collects what is written to stderr (fd 2) while it lives.
class StderrCapture {
  public:
    StderrCapture() {
        std::fflush(stderr);
        m_file = std::tmpfile();
        REQUIRE(m_file != nullptr);
        m_saved = ::dup(STDERR_FILENO);
        ::dup2(::fileno(m_file), STDERR_FILENO);
    }
    StderrCapture(const StderrCapture&) = delete;
    StderrCapture& operator=(const StderrCapture&) = delete;
    ~StderrCapture() {
        restore();
        std::fclose(m_file);
    }
    std::string text() {
        restore();
        std::string out;
        std::rewind(m_file);
        for (int c = std::fgetc(m_file); c != EOF; c = std::fgetc(m_file))
            out.push_back(static_cast<char>(c));
        return out;
    }

  private:
    void restore() {
        if (m_saved >= 0) {
            std::fflush(stderr);
            ::dup2(m_saved, STDERR_FILENO);
            ::close(m_saved);
            m_saved = -1;
        }
    }
    std::FILE* m_file = nullptr;
    int m_saved = -1;
};

} // namespace

TEST_CASE("an empty config gives the defaults and one local server") {
    const auto config = parsed("");
    CHECK(config.key_prefix == "lock:");
    CHECK(config.ttl == Millis{30'000});
    CHECK_FALSE(config.wait);
    CHECK_FALSE(config.min_validity);
    CHECK(config.connect_timeout == Millis{1'000});
    CHECK(config.command_timeout == Millis{1'000});
    CHECK(config.source == "config.toml");
    REQUIRE(config.servers.size() == 1);
    CHECK(config.servers[0].url.display() == "127.0.0.1:6379");
    CHECK(config.servers[0].connect_timeout == Millis{1'000});
    CHECK(config.servers[0].command_timeout == Millis{1'000});
}

TEST_CASE("every top-level key is read") {
    const auto config = parsed(R"(
key_prefix = "app:locks:"
ttl = "10s"
wait = "1.5m"
min_validity = "2s"
connect_timeout = "250ms"
command_timeout = 2
)");
    CHECK(config.min_validity == Millis{2'000});
    CHECK(config.key_prefix == "app:locks:");
    CHECK(config.ttl == Millis{10'000});
    CHECK(config.wait == Millis{90'000});
    CHECK(config.connect_timeout == Millis{250});
    CHECK(config.command_timeout == Millis{2'000});
    REQUIRE(config.servers.size() == 1);
    CHECK(config.servers[0].connect_timeout == Millis{250});
    CHECK(config.servers[0].command_timeout == Millis{2'000});
}

TEST_CASE("a duration may be a number of seconds, whole or fractional") {
    CHECK(parsed("ttl = 45").ttl == Millis{45'000});
    CHECK(parsed("ttl = 0.5").ttl == Millis{500});
    CHECK(parsed("wait = 0").wait == Millis{0});
    CHECK(parsed("wait = \"0s\"").wait == Millis{0});
}

TEST_CASE("servers inherit the top-level timeouts unless they set their own") {
    const auto config = parsed(R"(
connect_timeout = "2s"
command_timeout = "3s"

[[servers]]
url = "redis://a:6379"

[[servers]]
url = "redis://b:6380/2"
connect_timeout = "100ms"
command_timeout = 0.5

[[servers]]
url = "unix:///run/redis.sock"
)");
    REQUIRE(config.servers.size() == 3);
    CHECK(config.servers[0].url.display() == "a:6379");
    CHECK(config.servers[0].connect_timeout == Millis{2'000});
    CHECK(config.servers[0].command_timeout == Millis{3'000});
    CHECK(config.servers[1].url.display() == "b:6380/2");
    CHECK(config.servers[1].connect_timeout == Millis{100});
    CHECK(config.servers[1].command_timeout == Millis{500});
    CHECK(config.servers[2].url.socket_path == "/run/redis.sock");
}

TEST_CASE("servers may also be written as an inline array") {
    const auto config = parsed(R"(servers = [{ url = "redis://a" }, { url = "redis://b" }])");
    REQUIRE(config.servers.size() == 2);
    CHECK(config.servers[1].url.host == "b");
}

TEST_CASE("an empty servers array means the built-in local server") {
    const auto config = parsed("servers = []");
    REQUIRE(config.servers.size() == 1);
    CHECK(config.servers[0].url.display() == "127.0.0.1:6379");
}

TEST_CASE("username overrides the user in the url") {
    const auto config = parsed(R"(
[[servers]]
url = "redis://alice:pw@h"
username = "bob"
)");
    REQUIRE(config.servers.size() == 1);
    CHECK(config.servers[0].url.username == "bob");
    CHECK(config.servers[0].url.password == "pw");
}

TEST_CASE("an unknown key is an error at its line and column") {
    CHECK(error_of("frobnicate = 1") == "config.toml:1:1: unknown key 'frobnicate'");
    CHECK(error_of("ttl = \"5s\"\n  [lock]\n") == "config.toml:2:4: unknown key 'lock'");
}

TEST_CASE("a misspelt key gets a did-you-mean hint") {
    CHECK(error_of("key_prefix = \"x\"\n\ntll = 3\n") ==
          "config.toml:3:1: unknown key 'tll' (did you mean 'ttl'?)");
    CHECK(error_of("[[servers]]\nurl = \"redis://h\"\npasword_env = \"X\"\n") ==
          "config.toml:3:1: unknown key 'pasword_env' (did you mean 'password_env'?)");
    CHECK(error_of("[[server]]\nurl = \"redis://h\"\n") ==
          "config.toml:1:3: unknown key 'server' (did you mean 'servers'?)");
}

TEST_CASE("the first unknown key in the file is the one reported") {
    CHECK(error_of("zzz = 1\naaa = 2\n") == "config.toml:1:1: unknown key 'zzz'");
}

TEST_CASE("a top-level key written after [[servers]] is explained") {
    CHECK(error_of("[[servers]]\nurl = \"redis://h\"\nttl = \"5s\"\n") ==
          "config.toml:3:1: unknown key 'ttl' in [[servers]] (top-level keys must come before "
          "the first [[servers]])");
}

TEST_CASE("a server key at the top level is explained") {
    CHECK(error_of("url = \"redis://h\"\n") ==
          "config.toml:1:1: unknown key 'url' (it belongs in a [[servers]] table)");
}

TEST_CASE("a wrong type is an error at the value's line and column") {
    CHECK(error_of("key_prefix = \"x\"\nttl = true\n") ==
          "config.toml:2:7: 'ttl' must be a duration string like \"30s\" or a number of seconds, "
          "not a boolean");
    CHECK(error_of("key_prefix = 1") ==
          "config.toml:1:14: 'key_prefix' must be a string, not an integer");
    CHECK(error_of("wait = [1]") == "config.toml:1:8: 'wait' must be a duration string like "
                                    "\"30s\" or a number of seconds, not an array");
    CHECK(error_of("[[servers]]\nurl = 6379\n") ==
          "config.toml:2:7: 'url' must be a string, not an integer");
    CHECK(error_of("[[servers]]\nurl = \"redis://h\"\nusername = false\n") ==
          "config.toml:3:12: 'username' must be a string, not a boolean");
    CHECK(error_of("[[servers]]\nurl = \"redis://h\"\ncommand_timeout = 1979-05-27\n") ==
          "config.toml:3:19: 'command_timeout' must be a duration string like \"30s\" or a "
          "number of seconds, not a date");
}

TEST_CASE("servers must be an array of tables") {
    CHECK(error_of("servers = \"redis://h\"") ==
          "config.toml:1:11: 'servers' must be an array of tables ([[servers]]), not a string");
    CHECK(error_of("[servers]\nurl = \"redis://h\"\n") ==
          "config.toml:1:1: 'servers' must be an array of tables: write [[servers]], not "
          "[servers]");
    CHECK(error_of("servers = [\"redis://h\"]") ==
          "config.toml:1:12: each 'servers' entry must be a table, not a string");
}

TEST_CASE("a bad duration in the config is a config error naming the key") {
    CHECK(error_of("ttl = \"3x\"") ==
          "config.toml:1:7: 'ttl': invalid duration '3x': expected a number with an optional "
          "unit ms, s, m, h or d (e.g. 250ms, 30s, 5m)");
    CHECK(error_of("wait = -1") ==
          "config.toml:1:8: 'wait': invalid duration -1: expected a non-negative number of "
          "seconds");
}

TEST_CASE("a ttl below 10ms or a zero timeout is refused") {
    CHECK(error_of("ttl = 0") == "config.toml:1:7: 'ttl' must be at least 100ms, not 0s");
    CHECK(error_of("ttl = \"99ms\"") == "config.toml:1:7: 'ttl' must be at least 100ms, not 99ms");
    CHECK(parsed("ttl = \"100ms\"").ttl == Millis{100});
    CHECK(error_of("connect_timeout = 0") ==
          "config.toml:1:19: 'connect_timeout' must be at least 1ms, not 0s");
    CHECK(error_of("[[servers]]\nurl = \"redis://h\"\ncommand_timeout = \"0s\"\n") ==
          "config.toml:3:19: 'command_timeout' must be at least 1ms, not 0s");
}

TEST_CASE("key_prefix may be empty but only holds printable ascii without braces") {
    CHECK(parsed("key_prefix = \"\"").key_prefix.empty());
    CHECK(error_of("key_prefix = \"a\\tb\"") ==
          "config.toml:1:14: 'key_prefix' may only contain printable ASCII characters");
    CHECK(error_of("key_prefix = \"lock\u00e9:\"") ==
          "config.toml:1:14: 'key_prefix' may only contain printable ASCII characters");
    CHECK(error_of("key_prefix = \"{app}:\"") ==
          "config.toml:1:14: 'key_prefix' must not contain '{' or '}'");
}

TEST_CASE("a toml syntax error names its position") {
    CHECK(error_of("ttl = \n") ==
          "config.toml:1:7: error while parsing key-value pair: expected value, saw '\\n'");
    CHECK(error_of("ttl = 1\nttl = 2\n") == "config.toml:2:7: error while parsing key-value "
                                            "pair: cannot redefine existing integer 'ttl'");
}

TEST_CASE("a server needs a url") {
    CHECK(error_of("\n[[servers]]\nconnect_timeout = 1\n") ==
          "config.toml:2:1: a [[servers]] table needs a 'url'");
}

TEST_CASE("a bad url in the config is a config error at its position") {
    CHECK(error_of("[[servers]]\nurl = \"redis://:secret@h:x\"\n") ==
          "config.toml:2:7: invalid server url 'redis://:***@h:x': bad port 'x'");
}

TEST_CASE("tls keys at the top level are defaults that a server's own keys override") {
    const fs::path dir = fs::temp_directory_path() / ("redlock-tls-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    for (const char* name : {"ca.pem", "other.pem", "client.pem", "client.key"})
        std::ofstream(dir / name) << "x\n";
    const auto config = parsed(R"(
tls_ca_file = "ca.pem"
tls_server_name = "redis.internal"
[[servers]]
url = "rediss://a"
[[servers]]
url = "rediss://b"
tls_ca_file = ")" + (dir / "other.pem").string() +
                                   R"("
tls_cert_file = "client.pem"
tls_key_file = "client.key"
tls_verify = false
)",
                               dir / "config.toml");
    REQUIRE(config.servers.size() == 2);
    CHECK(config.servers[0].url.tls);
    CHECK(config.servers[0].tls.ca_file == (dir / "ca.pem").string()); // relative to the file
    CHECK(config.servers[0].tls.server_name == "redis.internal");
    CHECK(config.servers[0].tls.verify);
    CHECK(config.servers[1].tls.ca_file == (dir / "other.pem").string());
    CHECK(config.servers[1].tls.cert_file == (dir / "client.pem").string());
    CHECK(config.servers[1].tls.key_file == (dir / "client.key").string());
    CHECK(config.servers[1].tls.server_name == "redis.internal");
    CHECK_FALSE(config.servers[1].tls.verify);
    CHECK(config.tls.ca_file == (dir / "ca.pem").string());
    fs::remove_all(dir);
}

TEST_CASE("replicas is a default that a server may override") {
    const auto config = parsed("replicas = 1\n[[servers]]\nurl = \"redis://a\"\n[[servers]]\n"
                               "url = \"redis://b\"\nreplicas = 0\n");
    REQUIRE(config.servers.size() == 2);
    CHECK(config.servers[0].replicas == 1);
    CHECK(config.servers[1].replicas == 0);
    CHECK(error_of("replicas = 1.5\n") ==
          "config.toml:1:12: 'replicas' must be an integer, not a floating-point number");
}

TEST_CASE("bad tls values are config errors at their position") {
    CHECK(error_of("tls_verify = \"no\"\n") ==
          "config.toml:1:14: 'tls_verify' must be true or false, not a string");
    CHECK(error_of("tls_ca_file = \"\"\n") == "config.toml:1:15: 'tls_ca_file' must not be empty");
    CHECK(error_of("tls_cert_file = \"/nonexistent/c.pem\"\n") ==
          "config.toml:1:17: cannot read tls_cert_file '/nonexistent/c.pem': No such file or "
          "directory");
    CHECK(error_of("[[servers]]\nurl = \"rediss://h\"\ntls_server_name = 3\n") ==
          "config.toml:3:19: 'tls_server_name' must be a string, not an integer");
    CHECK(error_of("[[servers]]\nurl = \"rediss://h\"\ntls_verfy = true\n") ==
          "config.toml:3:1: unknown key 'tls_verfy' (did you mean 'tls_verify'?)");
}

TEST_CASE("a server has at most one password source") {
    CHECK(error_of("[[servers]]\nurl = \"redis://:pw@h\"\npassword_env = \"X\"\n") ==
          "config.toml:3:16: 'password_env' conflicts with the password in 'url'; give a server "
          "one password source");
    CHECK(error_of(
              "[[servers]]\npassword_file = \"f\"\npassword_env = \"X\"\nurl = \"redis://h\"\n") ==
          "config.toml:3:16: 'password_env' conflicts with 'password_file'; give a server one "
          "password source");
}

TEST_CASE("password_env reads the password from the environment") {
    EnvGuard variable("REDLOCK_TEST_PASSWORD");
    variable.set("from env");
    const auto config = parsed(
        "[[servers]]\nurl = \"redis://alice@h\"\npassword_env = \"REDLOCK_TEST_PASSWORD\"\n");
    REQUIRE(config.servers.size() == 1);
    CHECK(config.servers[0].url.username == "alice");
    CHECK(config.servers[0].url.password == "from env");
}

TEST_CASE("password_env naming an unset or empty variable is an error naming it") {
    EnvGuard variable("REDLOCK_TEST_PASSWORD");
    variable.unset();
    const std::string text =
        "[[servers]]\nurl = \"redis://h\"\npassword_env = \"REDLOCK_TEST_PASSWORD\"\n";
    CHECK(error_of(text) ==
          "config.toml:3:16: environment variable 'REDLOCK_TEST_PASSWORD' (password_env) is not "
          "set");
    variable.set("");
    CHECK(error_of(text) ==
          "config.toml:3:16: environment variable 'REDLOCK_TEST_PASSWORD' (password_env) is "
          "empty");
}

TEST_CASE("password_file is read relative to the config file's directory") {
    TempDir dir;
    dir.write("secrets/redis", "file pw\n");
    const auto config =
        parsed("[[servers]]\nurl = \"redis://h\"\npassword_file = \"secrets/redis\"\n",
               dir.path() / "config.toml");
    REQUIRE(config.servers.size() == 1);
    CHECK(config.servers[0].url.password == "file pw");
}

TEST_CASE("password_file loses one trailing newline and nothing else") {
    TempDir dir;
    const auto read = [&](std::string_view content) {
        const auto file = dir.write("pw", content);
        const auto config =
            parsed("[[servers]]\nurl = \"redis://h\"\npassword_file = \"" + file.string() + "\"\n");
        REQUIRE(config.servers.size() == 1);
        return config.servers[0].url.password.value_or("<none>");
    };
    CHECK(read("abc") == "abc");
    CHECK(read("abc\n") == "abc");
    CHECK(read("abc\r\n") == "abc");
    CHECK(read("abc\n\n") == "abc\n");
    CHECK(read(" abc ") == " abc ");
}

TEST_CASE("an unreadable or empty password_file is an error naming the path") {
    TempDir dir;
    const std::string text = "[[servers]]\nurl = \"redis://h\"\npassword_file = \"missing\"\n";
    CHECK(error_of(text, dir.path() / "config.toml") ==
          (dir.path() / "config.toml").string() + ":3:17: cannot read password_file '" +
              (dir.path() / "missing").string() + "': No such file or directory");
    const auto empty = dir.write("empty", "\n");
    CHECK(error_of("[[servers]]\nurl = \"redis://h\"\npassword_file = \"" + empty.string() +
                   "\"\n") == "config.toml:3:17: password_file '" + empty.string() + "' is empty");
}

TEST_CASE("load_config reads a file and records where it came from") {
    TempDir dir;
    const auto file = dir.write("config.toml", "ttl = \"12s\"\n[[servers]]\nurl = \"redis://h\"\n");
    auto config = load_config(file);
    REQUIRE_MESSAGE(config, config.error().message);
    CHECK(config->ttl == Millis{12'000});
    CHECK(config->source == file);
    REQUIRE(config->servers.size() == 1);
    CHECK(config->servers[0].url.host == "h");
}

TEST_CASE("load_config errors name the file path") {
    TempDir dir;
    const auto missing = dir.path() / "nope.toml";
    auto result = load_config(missing);
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == ErrorKind::config);
    CHECK(result.error().message ==
          "cannot read config '" + missing.string() + "': No such file or directory");

    const auto bad = dir.write("bad.toml", "tll = 1\n");
    result = load_config(bad);
    REQUIRE_FALSE(result);
    CHECK(result.error().message == bad.string() + ":1:1: unknown key 'tll' (did you mean 'ttl'?)");
}

TEST_CASE("without a file load_config gives the built-in default") {
    auto config = load_config(std::nullopt);
    REQUIRE(config);
    CHECK(config->source.empty());
    CHECK(config->ttl == Millis{30'000});
    REQUIRE(config->servers.size() == 1);
    CHECK(config->servers[0].url.display() == "127.0.0.1:6379");
}

TEST_CASE("a config holding a password and readable by others gets a warning") {
    TempDir dir;
    const auto file = dir.write("config.toml", "[[servers]]\nurl = \"redis://:pw@h\"\n", 0644);
    StderrCapture captured;
    auto config = load_config(file);
    const std::string text = captured.text();
    REQUIRE(config);
    CHECK(config->servers[0].url.password == "pw");
    CHECK(text == "redlock: warning: '" + file.string() +
                      "' contains a password and is readable by group or others; chmod 600 it\n");
}

TEST_CASE("a private config holding a password gets no warning") {
    TempDir dir;
    const auto file = dir.write("config.toml", "[[servers]]\nurl = \"redis://:pw@h\"\n", 0600);
    StderrCapture captured;
    auto config = load_config(file);
    CHECK(config);
    CHECK(captured.text().empty());
}

TEST_CASE("a readable config without an inline password gets no warning") {
    TempDir dir;
    dir.write("pw", "secret", 0600);
    const auto file = dir.write("config.toml",
                                "[[servers]]\nurl = \"redis://h\"\npassword_file = \"pw\"\n", 0644);
    StderrCapture captured;
    auto config = load_config(file);
    CHECK(config);
    CHECK(captured.text().empty());
}

TEST_CASE("a password_file readable by others gets a warning naming it") {
    TempDir dir;
    const auto secret = dir.write("pw", "secret", 0640);
    const auto file =
        dir.write("config.toml", "[[servers]]\nurl = \"redis://h\"\npassword_file = \"pw\"\n");
    StderrCapture captured;
    auto config = load_config(file);
    const std::string text = captured.text();
    REQUIRE(config);
    CHECK(config->servers[0].url.password == "secret");
    CHECK(text == "redlock: warning: password file '" + secret.string() +
                      "' is readable by group or others; chmod 600 it\n");
}

TEST_CASE("find_config_file follows -c, REDLOCK_CONFIG, XDG_CONFIG_HOME, HOME and /etc") {
    TempDir dir;
    EnvGuard redlock_config("REDLOCK_CONFIG");
    EnvGuard xdg("XDG_CONFIG_HOME");
    EnvGuard home("HOME");
    const auto explicit_file = dir.write("explicit.toml", "");
    const auto env_file = dir.write("env.toml", "");
    const auto xdg_file = dir.write("xdg/redlock/config.toml", "");
    const auto home_file = dir.write("home/.config/redlock/config.toml", "");
    redlock_config.set(env_file.string());
    xdg.set((dir.path() / "xdg").string());
    home.set((dir.path() / "home").string());

    CHECK(found(explicit_file) == std::optional<fs::path>{explicit_file});
    CHECK(found(std::nullopt) == std::optional<fs::path>{env_file});

    redlock_config.set("");
    CHECK(found(std::nullopt) == std::optional<fs::path>{xdg_file});

    redlock_config.unset();
    CHECK(found(std::nullopt) == std::optional<fs::path>{xdg_file});

    xdg.unset();
    CHECK(found(std::nullopt) == std::optional<fs::path>{home_file});

    xdg.set("relative/dir"); // the XDG spec says to ignore a relative path
    CHECK(found(std::nullopt) == std::optional<fs::path>{home_file});

    fs::remove(home_file);
    const std::optional<fs::path> fallback =
        fs::exists("/etc/redlock/config.toml") ? std::optional<fs::path>{"/etc/redlock/config.toml"}
                                               : std::nullopt;
    CHECK(found(std::nullopt) == fallback);
}

TEST_CASE("an explicitly named config that does not exist is an error") {
    TempDir dir;
    EnvGuard redlock_config("REDLOCK_CONFIG");
    const auto missing = dir.path() / "missing.toml";

    auto result = find_config_file(missing);
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == ErrorKind::config);
    CHECK(result.error().message ==
          "cannot read config '" + missing.string() + "' (named by -c): No such file or directory");

    // The user who did not type the path is told where it came from.
    redlock_config.set(missing.string());
    result = find_config_file(std::nullopt);
    REQUIRE_FALSE(result);
    CHECK(result.error().message == "cannot read config '" + missing.string() +
                                        "' (named by REDLOCK_CONFIG): No such file or directory");
}

TEST_CASE("config.example.toml at the top of the repo loads as-is") {
    // The source dir from CMake, not __FILE__: a compiler cache may make __FILE__ relative.
    const fs::path example = fs::path(REDLOCK_TEST_SOURCE_DIR) / "config.example.toml";
    REQUIRE(fs::exists(example));
    StderrCapture captured;
    auto config = load_config(example);
    const std::string text = captured.text();
    REQUIRE_MESSAGE(config, config.error().message);
    CHECK(text.empty());
    CHECK(config->key_prefix == "lock:");
    CHECK(config->ttl == Millis{30'000});
    CHECK_FALSE(config->wait);
    CHECK(config->connect_timeout == Millis{1'000});
    CHECK(config->command_timeout == Millis{1'000});
    REQUIRE(config->servers.size() == 1);
    CHECK(config->servers[0].url.display() == "127.0.0.1:6379");
}

// toml++ 3.3.0 reaches an unreachable point (undefined behaviour) on these; the config
// must refuse them itself, at the right place (marzer/tomlplusplus#190, #295).
TEST_CASE("a non-ascii character outside a string or comment is an error at its position") {
    CHECK(error_of("ttl = \"1s\" \xc3\xb2\n") ==
          "config.toml:1:12: a non-ASCII character outside a string or comment");
    CHECK(error_of("ttl = \"1s\"\xc3\xb2\n") ==
          "config.toml:1:11: a non-ASCII character outside a string or comment");
    CHECK(error_of("# f\xc3\xbcr\n\xc3\xb2 = 1\n") ==
          "config.toml:2:1: a non-ASCII character outside a string or comment");
    CHECK(error_of("[\xc3\xb2]\n") ==
          "config.toml:1:2: a non-ASCII character outside a string or comment");
    CHECK(error_of("wait = [1,\xe3\x80\x80]\n") ==
          "config.toml:1:11: a non-ASCII character outside a string or comment");
    CHECK(error_of("ttl = \"\\\"\" \xef\xbb\xbe\n") ==
          "config.toml:1:12: a non-ASCII character outside a string or comment");
}

TEST_CASE("a non-ascii character right after a line-ending backslash is an error") {
    CHECK(error_of("key_prefix = \"\"\"\\\n\xc2\xa7\"\"\"\n") ==
          "config.toml:2:1: a non-ASCII character right after a line-ending backslash; "
          "write it as \\uXXXX");
    CHECK(error_of("key_prefix = \"\"\"a\\  \r\n   \n  \xc2\xa7\"\"\"\n") ==
          "config.toml:3:3: a non-ASCII character right after a line-ending backslash; "
          "write it as \\uXXXX");
}

TEST_CASE("invalid utf-8 in the config is an error at the first bad byte") {
    CHECK(error_of("ttl = \"5s\"\n# caf\xc3\xa9 \xff\n") ==
          "config.toml:2:8: invalid UTF-8 (byte 0xff)");
    CHECK(error_of("ttl = \"\xc3\"\n") == "config.toml:1:8: invalid UTF-8 (byte 0xc3)");
}

TEST_CASE("non-ascii text inside strings and comments is still read") {
    TempDir dir;
    dir.write("p\xc3\xa4ss", "pw\n");
    auto cfg = parsed("# Zugang f\xc3\xbcr alle \xe2\x82\xac\n[[servers]] # \xc3\xb2\n"
                      "url = \"redis://127.0.0.1:1\"\npassword_file = \"p\xc3\xa4ss\"\n",
                      dir.path() / "config.toml");
    CHECK(cfg.servers.at(0).url.password == "pw");
    const char* usernames[] = {
        "username = \"j\xc3\xb3zef\" # \xc3\xb2\n",
        "username = 'j\xc3\xb3zef'\n",
        "username = \"\"\"\\\n   j\xc3\xb3zef\"\"\"\n",
        "username = '''j\xc3\xb3zef'''\n",
        "username = \"\\\"j\xc3\xb3zef\"\n",
        "username = \"\"\"j\xc3\xb3zef\"\"\"\"\"\n",
    };
    for (const char* line : usernames) {
        CAPTURE(line);
        auto c = parsed(std::string("[[servers]]\nurl = \"redis://127.0.0.1:1\"\n") + line);
        CHECK(c.servers.at(0).url.username.value_or("").find("j\xc3\xb3zef") != std::string::npos);
    }
}
