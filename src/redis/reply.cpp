#include "redis/reply.hpp"

#include <cctype>
#include <charconv>
#include <vector>

#include "util/format.hpp"

namespace redlock::redis {

std::map<std::string, std::string> hash_fields(const redisReply& reply) {
    std::map<std::string, std::string> fields;
    for (size_t i = 0; reply.type == REDIS_REPLY_ARRAY && i + 1 < reply.elements; i += 2)
        fields[std::string(text(*reply.element[i]))] = std::string(text(*reply.element[i + 1]));
    return fields;
}

std::string encode_command(std::span<const std::string_view> argv) {
    // Hand-rolled rather than redisFormatCommandArgv: the same bytes, without the
    // malloc/free pair and the pointer/length arrays it needs.
    std::string out;
    size_t size = 16;
    for (auto a : argv)
        size += a.size() + 16;
    out.reserve(size);
    // "*3\r\n" then "$5\r\nvalue\r\n" per word; to_chars, not format: this runs for every
    // command of every run.
    auto header = [&out](char kind, size_t n) {
        char buf[24];
        buf[0] = kind;
        char* end = std::to_chars(buf + 1, buf + sizeof buf - 2, n).ptr;
        *end++ = '\r';
        *end++ = '\n';
        out.append(buf, end);
    };
    header('*', argv.size());
    for (auto a : argv) {
        header('$', a.size());
        out.append(a);
        out += "\r\n";
    }
    return out;
}

bool refuses_command(std::string_view error, std::string_view command) {
    // "NOPERM this user has no permissions to run the 'evalsha' command", "ERR unknown
    // command 'evalsha', with args beginning with: ..." (quotes differ between versions),
    // "ERR unknown subcommand 'load'..." of SCRIPT.
    std::string lower;
    for (char c : error.substr(0, 160))
        lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    const std::string quoted = "'" + std::string(command) + "'";
    const std::string backquoted = "`" + std::string(command) + "`";
    const bool named =
        lower.find(quoted) != std::string::npos || lower.find(backquoted) != std::string::npos;
    return named &&
           (lower.starts_with("noperm") || lower.find("unknown command") != std::string::npos ||
            lower.find("unknown subcommand") != std::string::npos);
}

bool refuses_evalsha(std::string_view error) {
    return refuses_command(error, "evalsha");
}

ErrorCode error_code(std::string_view e) {
    auto has = [&](std::string_view part) { return e.find(part) != std::string_view::npos; };
    // Redis 7 cuts off an unauthenticated client sending a long command this way.
    if (e.starts_with("NOAUTH") || has("Protocol error: unauthenticated"))
        return ErrorCode::noauth;
    if (e.starts_with("WRONGPASS") || e.starts_with("ERR invalid password") ||
        e.starts_with("ERR AUTH") || e.starts_with("ERR Client sent AUTH"))
        return ErrorCode::wrongpass;
    // A command a script calls that the ACL refuses answers "ERR The user executing the
    // script can't ..." (Redis 6.0 and 7.0, 6.0 behind "ERR Error running script ..."),
    // NOPERM with "script:" in the text (7.2), or "ERR ACL failure in script: ..." (Redis
    // 8, Valkey 8). Redis 7.0 says "can't access" of a key only of a script's command.
    if ((e.starts_with("NOPERM") && has("script:")) || has("can't run this command") ||
        has("can't access") || has("ACL failure in script") ||
        (has("NOPERM") && !e.starts_with("NOPERM")))
        return ErrorCode::script_noperm;
    if (e.starts_with("NOPERM"))
        return ErrorCode::noperm;
    if (e.starts_with("NOSCRIPT"))
        return ErrorCode::noscript;
    if (e.starts_with("ERR unknown command"))
        return ErrorCode::unknown_command;
    // Older servers wrap a script's errors: "ERR Error running script ...: WRONGTYPE ...".
    if (e.starts_with("WRONGTYPE") || has("WRONGTYPE Operation"))
        return ErrorCode::wrongtype;
    if (e.starts_with("MOVED "))
        return ErrorCode::moved;
    if (e.starts_with("ASK "))
        return ErrorCode::ask;
    if (e.starts_with("TRYAGAIN"))
        return ErrorCode::tryagain;
    if (e.starts_with("CROSSSLOT"))
        return ErrorCode::crossslot;
    if (e.starts_with("READONLY"))
        return ErrorCode::readonly;
    if (e.starts_with("LIMIT "))
        return ErrorCode::limit;
    return ErrorCode::other;
}

bool is_auth_error(const redisReply& r) {
    if (!is_error(r))
        return false;
    switch (error_code(text(r))) {
    case ErrorCode::noauth:
    case ErrorCode::wrongpass:
    case ErrorCode::noperm:
    case ErrorCode::script_noperm:
        return true;
    default:
        return false;
    }
}

bool refused_before_running(std::string_view error) {
    switch (error_code(error)) {
    case ErrorCode::noauth:
    case ErrorCode::wrongpass:
    case ErrorCode::noperm: // not script_noperm: that comes after what the script did before
    case ErrorCode::noscript:
    case ErrorCode::unknown_command:
    case ErrorCode::moved:
    case ErrorCode::ask:
    case ErrorCode::tryagain:
    case ErrorCode::crossslot:
        return true;
    default:
        return false;
    }
}

std::string describe_refusal(std::string_view error, bool password_given) {
    const auto code = error_code(error);
    if (code == ErrorCode::noauth && !password_given)
        return util::format("the server requires a password and none was given ({})", error);
    if (code == ErrorCode::noperm || code == ErrorCode::script_noperm)
        return util::format("permission denied by the server's ACL: {}", error);
    return std::string(error);
}

std::string describe(const redisReply& r) {
    switch (r.type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        return std::string(text(r));
    case REDIS_REPLY_INTEGER:
        return util::format("(integer) {}", r.integer);
    case REDIS_REPLY_NIL:
        return "(nil)";
    case REDIS_REPLY_ARRAY:
        return util::format("(array of {})", r.elements);
    default:
        return "(unknown reply)";
    }
}

} // namespace redlock::redis
