#include "lock/holder.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <pwd.h>
#include <unistd.h>

#include "process/identity.hpp"
#include "util/clock.hpp"
#include "util/file.hpp"
#include "util/format.hpp"
#include "util/redact.hpp"
#include "util/sha256.hpp"
#include "util/timestamp.hpp"

namespace redlock::lock {

namespace {

constexpr size_t k_max_command_length = 1024;

} // namespace

std::string iso8601_now() {
    return util::format_utc_timestamp(
        std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now()));
}

namespace {

// /etc/passwd read directly: getpwuid() goes through NSS (nsswitch.conf read and parsed,
// the files module set up) and costs 23 k instructions, 7% of a plain `run`, for a name
// that is nearly always a local user. Where passwd is "files" first (Debian's default)
// both give the same answer; users only another source knows (LDAP, sssd) still get
// getpwuid().
std::optional<std::string> local_user_name(uid_t uid) {
    constexpr size_t k_max_passwd_size = size_t{4} << 20;
    int error = 0;
    auto passwd = util::read_file("/etc/passwd", k_max_passwd_size, error);
    if (!passwd)
        return std::nullopt;
    return passwd_file_user(passwd->text, uid);
}

std::string user_name() {
    uid_t uid = ::geteuid();
    if (auto name = local_user_name(uid))
        return *name;
    if (const passwd* pw = ::getpwuid(uid); pw && pw->pw_name)
        return pw->pw_name;
    return std::to_string(uid);
}

} // namespace

std::optional<std::string> passwd_file_user(std::string_view passwd, unsigned uid) {
    while (!passwd.empty()) {
        const size_t end = std::min(passwd.find('\n'), passwd.size());
        std::string_view line = passwd.substr(0, end);
        passwd.remove_prefix(std::min(end + 1, passwd.size()));
        // name:password:uid:...
        const size_t name_end = line.find(':');
        if (name_end == 0 || name_end == std::string_view::npos || line[0] == '+' || line[0] == '-')
            continue;
        const size_t uid_start = line.find(':', name_end + 1);
        if (uid_start == std::string_view::npos)
            continue;
        const std::string_view rest = line.substr(uid_start + 1);
        unsigned value = 0;
        auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
        if (ec == std::errc() && ptr != rest.data() && ptr < rest.data() + rest.size() &&
            *ptr == ':' && value == uid)
            return std::string(line.substr(0, name_end));
    }
    return std::nullopt;
}

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
    // When the holder process was surely running, on this boot's clock: a nested run's
    // proof that its ancestor with this pid is the holder (process/identity.hpp). Read
    // with acquired_at, the two say when this boot began (boot_started_ms).
    h.process = std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   util::BootClock::now().time_since_epoch())
                                   .count());
    h.acquired_at = iso8601_now();
    if (const auto ns = process::pid_namespace())
        h.pid_ns = std::to_string(ns);
    h.machine = process::machine_id();
    h.boot = process::boot_id();
    h.user = user_name();
    h.command = util::redact_secrets(shell_quote(command), secrets);
    if (h.command.size() > k_max_command_length)
        h.command = h.command.substr(0, k_max_command_length - 3) + "...";
    return h;
}

std::string nest_digest(std::string_view secret) {
    return util::sha256_hex(secret);
}

std::vector<std::string> holder_fields(const Holder& holder, const std::string& token) {
    std::vector<std::string> fields{"token",       token,
                                    "host",        holder.host,
                                    "pid",         std::to_string(holder.pid),
                                    "user",        holder.user,
                                    "command",     holder.command,
                                    "acquired_at", holder.acquired_at,
                                    "ttl_ms",      std::to_string(holder.ttl_ms)};
    if (!holder.process.empty())
        fields.insert(fields.end(), {"process", holder.process});
    if (!holder.pid_ns.empty())
        fields.insert(fields.end(), {"pidns", holder.pid_ns});
    if (!holder.nest.empty())
        fields.insert(fields.end(), {"nest", holder.nest});
    if (!holder.machine.empty())
        fields.insert(fields.end(), {"machine", holder.machine});
    if (!holder.boot.empty())
        fields.insert(fields.end(), {"boot", holder.boot});
    return fields;
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
    h.process = get("process");
    h.pid_ns = get("pidns");
    h.nest = get("nest");
    h.machine = get("machine");
    h.boot = get("boot");
    return h;
}

bool of_another_boot(const Holder& holder, const Holder& here) {
    return !holder.machine.empty() && !holder.boot.empty() && !here.machine.empty() &&
           !here.boot.empty() && !holder.host.empty() && holder.machine == here.machine &&
           holder.host == here.host && holder.boot != here.boot;
}

std::optional<long long> boot_started_ms(const Holder& holder) {
    const auto acquired = util::parse_utc_timestamp(holder.acquired_at);
    long long up = -1;
    const auto& text = holder.process;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), up);
    if (!acquired || ec != std::errc() || end != text.data() + text.size() ||
        !util::plausible_ms(up))
        return std::nullopt;
    return util::plausible_ms(acquired->time_since_epoch().count() - up);
}

} // namespace redlock::lock
