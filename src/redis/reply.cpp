#include "redis/reply.hpp"

#include <cctype>
#include <charconv>
#include <vector>

#include "util/format.hpp"

namespace redlock::redis {

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

bool refuses_evalsha(std::string_view error) {
    // "NOPERM this user has no permissions to run the 'evalsha' command", "ERR unknown
    // command 'evalsha', with args beginning with: ..." (quotes differ between versions).
    std::string lower;
    for (char c : error.substr(0, 120))
        lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    bool names_evalsha = lower.find("'evalsha'") != std::string::npos ||
                         lower.find("`evalsha`") != std::string::npos;
    return names_evalsha &&
           (lower.starts_with("noperm") || lower.find("unknown command") != std::string::npos);
}

bool is_auth_error(const redisReply& r) {
    if (!is_error(r))
        return false;
    auto t = text(r);
    return t.starts_with("NOAUTH") || t.starts_with("WRONGPASS") || t.starts_with("NOPERM") ||
           t.starts_with("ERR invalid password") || t.starts_with("ERR AUTH") ||
           t.starts_with("ERR Client sent AUTH") ||
           // Redis 7 cuts off an unauthenticated client sending a long command this way.
           t.find("Protocol error: unauthenticated") != std::string_view::npos ||
           // An ACL refusal of a command our Lua script calls.
           t.find("can't run this command") != std::string_view::npos ||
           t.find("NOPERM") != std::string_view::npos;
}

bool refused_before_running(std::string_view error) {
    // A command a script calls that the ACL refuses answers "ERR The user executing the
    // script can't ..." (Redis 7.0) or NOPERM with "script:" in the text (7.2): after what
    // the script did before it.
    return error.starts_with("NOAUTH") || error.starts_with("WRONGPASS") ||
           (error.starts_with("NOPERM") && error.find("script:") == std::string_view::npos) ||
           error.starts_with("NOSCRIPT") || error.starts_with("ERR unknown command") ||
           error.starts_with("MOVED ") || error.starts_with("ASK ") ||
           error.starts_with("TRYAGAIN") || error.starts_with("CROSSSLOT") ||
           error.find("Protocol error: unauthenticated") != std::string_view::npos;
}

std::string describe_refusal(std::string_view error, bool password_given) {
    const bool unauthenticated =
        error.starts_with("NOAUTH") ||
        error.find("Protocol error: unauthenticated") != std::string_view::npos;
    if (unauthenticated && !password_given)
        return util::format("the server requires a password and none was given ({})", error);
    if (error.starts_with("NOPERM") ||
        error.find("can't run this command") != std::string_view::npos ||
        error.find("can't access") != std::string_view::npos)
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
