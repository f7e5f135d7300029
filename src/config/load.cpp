#include "config/load.hpp"

#include <algorithm>
#include <filesystem>

#include "config/server_url.hpp"
#include "util/format.hpp"
#include "util/log.hpp"

namespace redlock::config {

namespace log = util::log;

util::Expected<Config> load(const std::optional<std::string>& config_file,
                            const std::vector<std::string>& servers) {
    std::optional<std::filesystem::path> explicit_path;
    if (config_file) {
        // "-c ''" is a mistake (an unset variable in "-c $CONF"), not a request for the
        // search path.
        if (config_file->empty())
            return util::fail(util::ErrorKind::usage, "--config: the file name is empty");
        explicit_path = *config_file;
    }
    auto path = find_config_file(explicit_path);
    if (!path)
        return std::unexpected(path.error());
    // The first question when nothing connects: which file, if any, was read.
    if (*path)
        log::verbose("config: {}", (*path)->string());
    else
        log::verbose("config: none found (-c, $REDLOCK_CONFIG, "
                     "$XDG_CONFIG_HOME/redlock/config.toml, /etc/redlock/config.toml); "
                     "built-in defaults{}",
                     servers.empty() ? ", server redis://127.0.0.1:6379" : "");
    if (!servers.empty())
        log::verbose("servers: {} from -s, in place of the config's", servers.size());
    auto cfg = load_config(*path);
    if (!cfg)
        return cfg;
    if (!servers.empty()) {
        cfg->servers.clear();
        for (const auto& url : servers) {
            auto parsed = parse_server_url(url);
            if (!parsed)
                return std::unexpected(parsed.error());
            cfg->servers.push_back(ServerConfig{std::move(*parsed),
                                                cfg->connect_timeout,
                                                cfg->command_timeout,
                                                {},
                                                cfg->tls,
                                                cfg->replicas,
                                                {},
                                                {}});
        }
    }
    for (const auto& s : cfg->servers)
        if (s.url.tls && !s.tls.verify)
            log::verbose("{}: tls_verify is false: the server's certificate is not checked",
                         s.url.display());
    // The same server twice would count twice towards the quorum (and, as both copies
    // answer for one key, a lock could never be taken): refuse it, however it is written
    // ([::1] and [0:0:0:0:0:0:0:1], localhost and 127.0.0.1, a path with .. or a symlink).
    // Host names are resolved only here, with 2+ servers: one server costs nothing.
    std::vector<std::vector<std::string>> identities;
    if (cfg->servers.size() > 1)
        for (const auto& s : cfg->servers)
            identities.push_back(server_identities(s.url, true));
    auto written = [](const ServerUrl& u) {
        return u.is_unix()                             ? u.socket_path
               : u.host.find(':') != std::string::npos ? util::format("[{}]:{}", u.host, u.port)
                                                       : util::format("{}:{}", u.host, u.port);
    };
    for (size_t i = 0; i < identities.size(); ++i)
        for (size_t j = 0; j < i; ++j) {
            const auto& a = cfg->servers[i].url;
            const auto& b = cfg->servers[j].url;
            bool same = std::ranges::any_of(identities[i], [&](const std::string& key) {
                return std::ranges::find(identities[j], key) != identities[j].end();
            });
            if (same) {
                // Where the first listing was: its line in the file, and how it was written
                // if not the same way ([::1] and [0:0:0:0:0:0:0:1], a name and an address).
                std::string first;
                if (servers.empty())
                    first = "at " + cfg->servers[j].where;
                if (written(a) != written(b))
                    first += (first.empty() ? "as " : ", as ") + written(b);
                std::string message = util::format(
                    "server {} is listed more than once{}; Redlock needs independent servers",
                    written(a), first.empty() ? "" : " (first " + first + ")");
                if (servers.empty())
                    return util::fail(util::ErrorKind::config,
                                      util::format("{}:{}: {}", cfg->source.string(),
                                                   cfg->servers[i].where, message));
                return util::fail(util::ErrorKind::usage, message);
            }
        }
    return cfg;
}

} // namespace redlock::config
