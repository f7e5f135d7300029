#include <doctest/doctest.h>

#include "lock/keys.hpp"

using redlock::lock::companion_of;
using redlock::lock::Keys;

TEST_CASE("the lock key is the prefix followed by the name") {
    CHECK(Keys("lock:", "backup").lock == "lock:backup");
    CHECK(Keys("", "backup").lock == "backup");
    CHECK(Keys("app/locks/", "a:b").lock == "app/locks/a:b");
}

TEST_CASE("every companion key puts the lock key in braces so it shares its cluster hash slot") {
    const Keys k("lock:", "backup");
    CHECK(k.meta == "{lock:backup}:meta");
    CHECK(k.record == "{lock:backup}:fence");
    CHECK(k.fence_field == "f");
    CHECK(k.queue == "{lock:backup}:queue");
    CHECK(k.waiting == "{lock:backup}:waiting");
    CHECK(k.old_slot == "{lock:backup}:slot");
    CHECK(k.limit == "{lock:backup}:limit");
    CHECK(k.released == "{lock:backup}:released");
    CHECK(k.name_lock == "lock:backup");
    CHECK(Keys("", "x").meta == "{x}:meta");
    CHECK(companion_of("lock:x", "meta") == "{lock:x}:meta");
}

TEST_CASE("a permit is a lock of its own in the name's hash slot, its fence in the name's record") {
    const Keys p = Keys("lock:", "pool").permit(3);
    CHECK(p.lock == "{lock:pool}:permit:3");
    CHECK(p.meta == "{lock:pool}:permit:3:meta");
    CHECK(p.record == "{lock:pool}:fence");
    CHECK(p.fence_field == "f3");
    CHECK(p.old_fence == "{lock:pool}:permit:3:fence");
    CHECK(p.limit == "{lock:pool}:limit");
    CHECK(p.released == "{lock:pool}:released");
    CHECK(p.name_lock == "lock:pool");
}

TEST_CASE("the keys of a lock key are those of its name") {
    CHECK(Keys::of_lock_key("lock:x").record == Keys("lock:", "x").record);
}
