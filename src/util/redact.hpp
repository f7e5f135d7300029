#pragma once
// Masks secrets in a command line before redlock stores or shows it. A recorded command
// (PROGRAM's, or the script that ran `redlock acquire`, often a `sh -c "<line>"`) can carry
// a password: in a URL, as an option's value, as a NAME=value assignment. Anyone who can
// read the lock can read its metadata, so what looks like a secret becomes "***".

#include <span>
#include <string>
#include <string_view>

namespace redlock::util {

inline constexpr std::string_view k_redacted = "***";

// `text` with every occurrence of a `known` secret (the configured passwords) masked, and
// besides them: the password of any URL (scheme://user:PASSWORD@host), the value of an
// option or assignment whose name says secret (--password X, --auth-token=X, PGPASSWORD=X,
// REDISCLI_AUTH=X, 'Authorization: Bearer X'), and redis-cli's `-a X`.
[[nodiscard]] std::string redact_secrets(std::string_view text,
                                         std::span<const std::string> known = {});

} // namespace redlock::util
