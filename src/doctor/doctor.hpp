#pragma once
// `redlock doctor`: checks each configured server for what makes a lock unsafe in normal
// operation (a version too old for a mode's scripts, an eviction policy that can drop lock
// keys, replication, clock offset, scripts that do not load, an ACL that refuses what
// locking needs) and for what depends on how servers restart (persistence).

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "redis/connection.hpp"

namespace redlock::doctor {

enum class Level { ok, note, risk };

[[nodiscard]] const char* level_name(Level level);

struct Check {
    std::string name; // "version", "eviction", "replication", "clock", "persistence", ..., "acl"
    Level level = Level::ok;
    std::string message;
};

struct ServerReport {
    std::string server;
    bool reachable = false;
    bool auth_error = false;
    std::string error;
    std::string software; // "redis" or "valkey"
    std::string version;  // the software's own
    std::string role;
    long replicas = 0;
    bool cluster = false;                  // INFO cluster: cluster_enabled
    double latency_ms = 0;                 // median PING round trip
    std::optional<double> clock_offset_ms; // server clock minus ours
    std::optional<std::string> maxmemory_policy;
    std::optional<long long> maxmemory;
    std::optional<std::string> appendonly;
    std::optional<std::string> appendfsync;
    bool scripts_ok = false;     // EVAL of a lock script runs
    std::string evalsha_refused; // the error when EVALSHA itself is refused
    std::optional<Check> acl;    // what the user's ACL refuses of what redlock sends
    // The lock scripts that failed on the probe lock for want of a command or option the
    // server lacks: "--limit fails: ERR ..." (found where the acl check runs them).
    std::vector<std::string> lacking;
    std::vector<Check> checks;
};

// Examines every server at once. `ttl` sets the clock-drift allowance (ttl*1% + 2ms);
// the scripts are tried on a probe key under `prefix`.
[[nodiscard]] std::vector<ServerReport>
examine(std::span<redis::Connection> conns, std::chrono::milliseconds ttl, std::string_view prefix);

} // namespace redlock::doctor
