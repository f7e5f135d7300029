#pragma once
// The configuration a command runs with: the file found (-c, $REDLOCK_CONFIG, the user's,
// the system's, or the built-in default), its servers replaced by -s URLs when given, and
// the rules on the server list: the same server listed twice (however it is written) is
// refused, since it would count twice towards the quorum.

#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "util/error.hpp"

namespace redlock::config {

// `config_file`: -c, when given (even empty: a usage error); `servers`: the -s URLs.
[[nodiscard]] util::Expected<Config> load(const std::optional<std::string>& config_file,
                                          const std::vector<std::string>& servers);

} // namespace redlock::config
