#include "doctor/version.hpp"

#include <charconv>

#include "util/format.hpp"

namespace redlock::doctor {

namespace {

// What the modes' scripts (lock/scripts.hpp) need of a server older than the oldest
// supported, newest first; anything from 6.0 on runs them all. (A command or option newer
// than 6.0 in a script needs a fallback there, as PEXPIREAT GT, SET PXAT and XTRIM MINID
// have: the servers' stage of scripts/test.sh runs every mode on Redis 6.0.)
struct Need {
    int major;
    int minor;
    const char* modes;
    const char* what;
};
constexpr Need k_needs[] = {
    {6, 0, "--fair", "SET KEEPTTL"},
    {5, 0, "run, acquire, --limit, --once-per and the history",
     "writes after TIME in a script: a new fence counter starts from the clock"},
    {4, 0, "extend", "HSET of several fields"},
};
constexpr std::pair<int, int> k_oldest{6, 0};

// "7.2.4" -> {7, 2}; nullopt unless it starts with two numbers.
std::optional<std::pair<int, int>> major_minor(std::string_view text) {
    int major = 0;
    int minor = 0;
    const char* end = text.data() + text.size();
    auto [dot, e1] = std::from_chars(text.data(), end, major);
    if (e1 != std::errc() || dot == end || *dot != '.')
        return std::nullopt;
    auto [rest, e2] = std::from_chars(dot + 1, end, minor);
    if (e2 != std::errc())
        return std::nullopt;
    return std::pair{major, minor};
}

} // namespace

std::string info_field(std::string_view info, std::string_view name) {
    const std::string needle = std::string(name) + ":";
    for (size_t pos = info.find(needle); pos != std::string_view::npos;
         pos = info.find(needle, pos + 1)) {
        if (pos != 0 && info[pos - 1] != '\n')
            continue;
        const size_t start = pos + needle.size();
        return std::string(info.substr(start, info.find_first_of("\r\n", start) - start));
    }
    return {};
}

ServerVersion server_version(std::string_view info) {
    ServerVersion out;
    out.name = info_field(info, "server_name");
    if (out.name.empty())
        out.name = "redis";
    const std::string redis = info_field(info, "redis_version");
    out.version = out.name == "valkey" ? info_field(info, "valkey_version") : redis;
    if (out.version.empty())
        out.version = redis;
    out.redis = major_minor(redis);
    return out;
}

Check version_check(const ServerVersion& server, std::span<const std::string> lacking) {
    std::string who = server.name + " " + server.version;
    if (!server.redis)
        who = "the server (INFO refused: version unknown)";
    else if (server.name != "redis")
        who += util::format(" (Redis {}.{})", server.redis->first, server.redis->second);
    std::string cannot;
    for (const auto& need : k_needs)
        if (server.redis && *server.redis < std::pair{need.major, need.minor})
            cannot += util::format("{}{} ({}.{}: {})", cannot.empty() ? "" : "; ", need.modes,
                                   need.major, need.minor, need.what);
    if (!cannot.empty())
        return {"version", Level::risk,
                util::format("{} is older than {}.{}, the oldest redlock supports; cannot run "
                             "here: {}",
                             who, k_oldest.first, k_oldest.second, cannot)};
    if (!lacking.empty()) {
        std::string failed;
        for (const auto& l : lacking)
            failed += (failed.empty() ? "" : "; ") + l;
        return {"version", Level::risk,
                util::format("{}: a lock script calls a command or option this server lacks "
                             "({})",
                             who, failed)};
    }
    if (!server.redis)
        return {"version", Level::note,
                util::format("cannot read the server's version (INFO refused): redlock needs "
                             "Redis {}.{} or later, or Valkey",
                             k_oldest.first, k_oldest.second)};
    return {"version", Level::ok, who + ": every mode's scripts run here"};
}

} // namespace redlock::doctor
