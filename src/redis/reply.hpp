#pragma once
// hiredis reply objects owned by unique_ptr from the line they arrive, plus the argv
// encoder: commands always go out as argv with explicit lengths, never via a format string.

#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <hiredis/hiredis.h>

namespace redlock::redis {

struct ReplyDeleter {
    void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

struct ReaderDeleter {
    void operator()(redisReader* reader) const { redisReaderFree(reader); }
};
using ReaderPtr = std::unique_ptr<redisReader, ReaderDeleter>;

// The RESP encoding of one command.
[[nodiscard]] std::string encode_command(std::span<const std::string_view> argv);

[[nodiscard]] inline bool is_error(const redisReply& r) {
    return r.type == REDIS_REPLY_ERROR;
}
[[nodiscard]] inline std::string_view text(const redisReply& r) {
    return r.str ? std::string_view(r.str, r.len) : std::string_view();
}
// What an error reply is, read once from its prefix (as redis-plus-plus does), so that no
// use site matches strings.
enum class ErrorCode {
    other,
    noauth,          // NOAUTH, or Redis 7 cutting off an unauthenticated client
    wrongpass,       // WRONGPASS, or an older server's "ERR invalid password" / "ERR AUTH"
    noperm,          // NOPERM: refused by the ACL (a command, key or channel)
    script_noperm,   // the ACL refused a command a script called, after what it did before
    noscript,        // EVALSHA of a script the server does not have
    unknown_command, // a command renamed or disabled
    wrongtype,       // WRONGTYPE: the key holds another type
    moved,           // MOVED: a cluster slot's owner is another node
    ask,             // ASK: the slot is being migrated; ask that node once
    tryagain,        // TRYAGAIN: keys on both sides of a migration
    crossslot,       // CROSSSLOT
    readonly,        // READONLY: a replica (a demoted master)
    limit,           // LIMIT N: redlock's permit script, holders with another --limit
};
[[nodiscard]] ErrorCode error_code(std::string_view error);

// True for the error replies that mean "authentication or permission refused".
[[nodiscard]] bool is_auth_error(const redisReply& r);
// True when an error reply says that the command was refused before it ran, so that it
// changed nothing: not authenticated, refused by the ACL (not a command a script called),
// an unknown script or command, keys that are not on this cluster node.
[[nodiscard]] bool refused_before_running(std::string_view error);
// An authentication or permission error reply in words for a message: a missing password
// ("the server requires a password and none was given (NOAUTH ...)") when none was given,
// an ACL refusal ("permission denied by the server's ACL: NOPERM ..."); else as it is.
[[nodiscard]] std::string describe_refusal(std::string_view error, bool password_given);
// True when an error reply says the EVALSHA command itself was refused (ACL NOPERM for
// 'evalsha', or an unknown command: renamed or disabled), not a command the script calls.
[[nodiscard]] bool refuses_evalsha(std::string_view error);
// The same of `command` (lowercase: "evalsha_ro", "script|load"), also as an unknown
// subcommand.
[[nodiscard]] bool refuses_command(std::string_view error, std::string_view command);
// The field/value pairs of a hash as HGETALL (or a script) replies them; empty for any
// other reply.
[[nodiscard]] std::map<std::string, std::string> hash_fields(const redisReply& reply);
// A short rendering for messages: "OK", "(nil)", "(integer) 1", the error text, ...
[[nodiscard]] std::string describe(const redisReply& r);

} // namespace redlock::redis
