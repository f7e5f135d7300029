#pragma once
// SHA-256 (FIPS 180-4), for what must stay secret behind its digest: a run's nesting secret
// is known to PROGRAM's tree alone, and only its digest goes to the servers.

#include <string>
#include <string_view>

namespace redlock::util {

// 64 lowercase hex digits.
[[nodiscard]] std::string sha256_hex(std::string_view data);

} // namespace redlock::util
