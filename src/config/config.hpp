#pragma once
// redlock's configuration: the TOML file found on the search path, overridden by the
// command line. Unknown keys and wrong types are errors naming file:line:col.

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "config/server_url.hpp"
#include "util/error.hpp"

namespace redlock::config {

using Millis = std::chrono::milliseconds;

// The shortest lease accepted (-t, ttl). Below it, scheduling delays on a loaded machine
// lose leases: bench/min-ttl.sh measured 12 of 20 runs lost at 10ms and 10 of 40 at 20ms,
// none of 40 at 50ms even with 8 busy loops on 2 cores; 100ms keeps twice that margin.
inline constexpr Millis k_min_ttl{100};

// How long the runs of a name are kept by default (history_max_age), and with them all the name
// leaves on the servers (lock/keys.hpp).
inline constexpr Millis k_history_max_age{std::chrono::hours(24 * 30)};

// TLS settings of a rediss:// server (keys tls_*, at top level or per server).
struct TlsConfig {
    std::string ca_file;     // empty: the system CA store
    std::string cert_file;   // a client certificate (PEM), with its key in key_file
    std::string key_file;    // empty: in cert_file
    std::string server_name; // SNI and the name to verify; empty: the URL's host
    bool verify = true;
};

struct ServerConfig {
    ServerUrl url;
    Millis connect_timeout{1000};
    Millis command_timeout{1000};
    std::string where; // "LINE:COL" of its url in the config file; empty for -s
    TlsConfig tls;
    // replicas = N: a lock write counts here only once N replicas acknowledged it (WAIT).
    int replicas = 0;
    // redis-sentinel://: the sentinels' own login (sentinel_username, sentinel_password_env,
    // sentinel_password_file), not the master's, which the URL's user and password give.
    std::optional<std::string> sentinel_username;
    std::optional<std::string> sentinel_password;
};

struct Config {
    std::string key_prefix = "lock:";
    Millis ttl{30000};                  // lease length for run/acquire
    std::optional<Millis> wait;         // default --wait; nullopt waits forever
    std::optional<Millis> min_validity; // default --min-validity of run
    TlsConfig tls;    // top-level tls_* keys: the defaults of every rediss:// server
    int replicas = 0; // default replicas of every server
    // The runs of each name kept on the servers (`history`), 0 for none, and for how long.
    size_t history = 300;
    Millis history_max_age = k_history_max_age;
    Millis connect_timeout{1000}; // default for servers (also those given with -s)
    Millis command_timeout{1000};
    // Monitoring (the defaults of run's --metrics and --on-lost): a metrics file, or a
    // directory with a file per lock name (empty: none); a command to run when a run
    // loses its lock, and how long it may take.
    std::string metrics_file;
    std::string metrics_dir;
    std::string on_lost;
    Millis hook_timeout{10000};
    std::vector<ServerConfig> servers; // never empty after load
    std::filesystem::path source;      // the file read, empty for built-in defaults
};

// The config file to read: -c FILE, else $REDLOCK_CONFIG, else
// $XDG_CONFIG_HOME/redlock/config.toml (default ~/.config/redlock/config.toml), else
// /etc/redlock/config.toml, else none (built-in default). An explicitly named file
// (-c or $REDLOCK_CONFIG) that does not exist is an error; the others are optional.
[[nodiscard]] util::Expected<std::optional<std::filesystem::path>>
find_config_file(const std::optional<std::filesystem::path>& explicit_path);

// Loads the file (or the built-in default when path is nullopt). Config errors
// (ErrorKind::config) read "FILE:LINE:COL: message". Warns on stderr when a file holding a
// password is readable by group or others.
[[nodiscard]] util::Expected<Config> load_config(const std::optional<std::filesystem::path>& path);

// Parses TOML text; `source` names it in messages. Exposed for tests.
[[nodiscard]] util::Expected<Config> parse_config(std::string_view text,
                                                  const std::filesystem::path& source);

} // namespace redlock::config
