#include "lock/holder.hpp"

#include <chrono>
#include <cstdlib>
#include <pwd.h>
#include <unistd.h>

#include "util/format.hpp"
#include "util/redact.hpp"
#include "util/timestamp.hpp"

namespace redlock::lock {

namespace {

constexpr size_t k_max_command_length = 1024;

std::string iso8601_now() {
    return util::format_utc_timestamp(
        std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now()));
}

std::string user_name() {
    uid_t uid = ::geteuid();
    if (const passwd* pw = ::getpwuid(uid); pw && pw->pw_name)
        return pw->pw_name;
    return std::to_string(uid);
}

} // namespace

std::string shell_quote(std::span<const std::string> words) {
    std::string out;
    for (const auto& w : words) {
        if (!out.empty())
            out.push_back(' ');
        bool plain = !w.empty();
        for (char c : w)
            plain &= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     std::string_view("-_./:=@%+,").find(c) != std::string_view::npos;
        if (plain) {
            out += w;
            continue;
        }
        out.push_back('\'');
        for (char c : w) {
            if (c == '\'')
                out += "'\\''";
            else
                out.push_back(c);
        }
        out.push_back('\'');
    }
    return out;
}

Holder current_holder(std::span<const std::string> command, long pid,
                      std::span<const std::string> secrets) {
    Holder h;
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0)
        h.host = host;
    h.pid = pid;
    h.user = user_name();
    h.command = util::redact_secrets(shell_quote(command), secrets);
    if (h.command.size() > k_max_command_length)
        h.command = h.command.substr(0, k_max_command_length - 3) + "...";
    h.acquired_at = iso8601_now();
    return h;
}

std::vector<std::string> holder_fields(const Holder& holder, const std::string& token) {
    return {"token",       token,
            "host",        holder.host,
            "pid",         std::to_string(holder.pid),
            "user",        holder.user,
            "command",     holder.command,
            "acquired_at", holder.acquired_at,
            "ttl_ms",      std::to_string(holder.ttl_ms)};
}

std::optional<Holder> parse_holder(const std::map<std::string, std::string>& fields,
                                   const std::string& token) {
    auto get = [&](const char* name) -> std::string {
        auto it = fields.find(name);
        return it == fields.end() ? std::string() : it->second;
    };
    if (fields.empty() || get("token") != token)
        return std::nullopt;
    Holder h;
    h.host = get("host");
    h.pid = std::strtol(get("pid").c_str(), nullptr, 10);
    h.user = get("user");
    h.command = util::redact_secrets(get("command"));
    h.acquired_at = get("acquired_at");
    h.ttl_ms = std::strtoll(get("ttl_ms").c_str(), nullptr, 10);
    return h;
}

} // namespace redlock::lock
