#include "lock/keys.hpp"

#include "util/sha1.hpp"

namespace redlock::lock {

std::string release_id(std::string_view token) {
    const auto hex = util::sha1_hex(token);
    return std::string(hex.data(), 12);
}

std::string companion_of(std::string_view lock_key, std::string_view suffix) {
    std::string key;
    key.reserve(lock_key.size() + suffix.size() + 3);
    key.append("{").append(lock_key).append("}:").append(suffix);
    return key;
}

Keys::Keys(std::string_view prefix, std::string_view name) {
    std::string key;
    key.reserve(prefix.size() + name.size());
    key.append(prefix).append(name);
    *this = of_lock_key(key);
}

Keys Keys::of_lock_key(std::string_view lock_key) {
    Keys k;
    k.lock = lock_key;
    k.meta = companion_of(lock_key, "meta");
    k.record = companion_of(lock_key, k_record_suffix);
    k.fence_field = "f";
    k.queue = companion_of(lock_key, "queue");
    k.waiting = companion_of(lock_key, "waiting");
    k.limit = companion_of(lock_key, "limit");
    k.waiters = companion_of(lock_key, "waiters");
    k.released = companion_of(lock_key, "released");
    k.wake = companion_of(lock_key, "w:");
    k.events = companion_of(lock_key, "events");
    k.name_lock = lock_key;
    k.old_slot = companion_of(lock_key, "slot");
    return k;
}

Keys Keys::permit(size_t i) const {
    Keys k = *this;
    const std::string base = "permit:" + std::to_string(i);
    k.lock = companion_of(name_lock, base);
    k.meta = companion_of(name_lock, base + ":meta");
    k.fence_field = "f" + std::to_string(i);
    k.old_fence = companion_of(name_lock, base + ":fence");
    return k;
}

} // namespace redlock::lock
