#pragma once
// The one error type that crosses module boundaries. Each kind maps to exactly one exit
// status (see exit_status), so every command reports failures the same way.

#include <expected>
#include <string>

namespace redlock::util {

enum class ErrorKind {
    usage,          // bad option, bad duration, bad lock name: 64
    unavailable,    // too few servers reachable for a quorum: 69
    internal,       // a bug or an unexpected system failure: 70
    auth,           // AUTH/ACL refused by the server: 77
    config,         // unreadable, malformed or invalid config: 78
    conflict,       // lock held by another owner or --wait ran out: 75 (or -E)
    lease_lost,     // the lease was lost while PROGRAM ran: 79
    cannot_execute, // PROGRAM found but not executable: 126
    not_found,      // PROGRAM not found: 127
};

struct Error {
    ErrorKind kind;
    std::string message; // lowercase, no "redlock: " prefix, no trailing period
};

template <typename T>
using Expected = std::expected<T, Error>;

[[nodiscard]] inline std::unexpected<Error> fail(ErrorKind kind, std::string message) {
    return std::unexpected(Error{kind, std::move(message)});
}

// The exit status documented in the contract for an error kind.
[[nodiscard]] int exit_status(ErrorKind kind);

namespace exit_code {
inline constexpr int usage = 64;
inline constexpr int unavailable = 69;
inline constexpr int internal = 70;
inline constexpr int conflict = 75;
inline constexpr int auth = 77;
inline constexpr int config = 78;
inline constexpr int lease_lost = 79;
inline constexpr int max_hold = 124; // --max-hold ran out, as timeout(1)
inline constexpr int cannot_execute = 126;
inline constexpr int not_found = 127;
} // namespace exit_code

} // namespace redlock::util
