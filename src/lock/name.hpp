#pragma once
// Lock names: 1-200 characters of A-Z a-z 0-9 . _ : / @ + -, so that a name is safe in a
// Redis key, a shell word and a log line alike.

#include <string>
#include <string_view>

#include "util/error.hpp"

namespace redlock::lock {

inline constexpr size_t k_max_name_length = 200;

// A usage error naming the problem when `name` is not a valid lock name.
[[nodiscard]] util::Expected<void> validate_name(std::string_view name);

} // namespace redlock::lock
