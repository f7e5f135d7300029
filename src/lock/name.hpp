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

// The Redis key of the lock itself: <prefix><name>.
[[nodiscard]] std::string lock_key(std::string_view prefix, std::string_view name);

// A companion key in the lock key's Redis Cluster hash slot: {<prefix><name>}:<suffix>.
[[nodiscard]] std::string companion_key(std::string_view prefix, std::string_view name,
                                        std::string_view suffix);

// The pub/sub channel a release announces itself on, {<lock key>}:released: in the lock
// key's hash slot, so that it stays legal where PUBLISH becomes SPUBLISH (sharded pub/sub).
[[nodiscard]] std::string release_channel(std::string_view lock_key);
// Another companion of a lock key: {<lock key>}:<suffix>.
[[nodiscard]] std::string companion_of(std::string_view lock_key, std::string_view suffix);

} // namespace redlock::lock
