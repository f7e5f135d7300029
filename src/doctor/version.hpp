#pragma once
// The "version" check of `redlock doctor`: which server it is (Redis or Valkey, from INFO
// server) and whether every mode's scripts can run on it. Redis 6.0 is the oldest
// supported (Debian 11's and Ubuntu 22.04's); tests/servers runs the suite against it,
// Redis 7.0 and 8 and Valkey 8.

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "doctor/doctor.hpp"

namespace redlock::doctor {

struct ServerVersion {
    std::string name;    // "redis" or "valkey" (INFO's server_name)
    std::string version; // its own: valkey_version for Valkey, else redis_version
    // The Redis version whose commands it has (redis_version: Valkey 8 says 7.2.4), as
    // major and minor; nullopt when INFO did not say.
    std::optional<std::pair<int, int>> redis;
};

// A field of INFO's text ("role" of INFO replication: "master"); empty when absent.
[[nodiscard]] std::string info_field(std::string_view info, std::string_view name);

// From the text of INFO server; an empty version when it does not say.
[[nodiscard]] ServerVersion server_version(std::string_view info);

// ok on Redis 6.0 or later (and Valkey), a risk naming the modes that cannot run on an
// older one and what they need, a note when the version is unknown (INFO refused). A risk
// too where a mode's script failed on the probe lock for want of what the server has not
// (`lacking`: ServerReport::lacking).
[[nodiscard]] Check version_check(const ServerVersion& server,
                                  std::span<const std::string> lacking = {});

} // namespace redlock::doctor
