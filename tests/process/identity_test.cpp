#include <chrono>
#include <unistd.h>

#include <doctest/doctest.h>

#include "process/identity.hpp"
#include "util/clock.hpp"

using redlock::process::identity;
using redlock::process::is_ancestor;
using redlock::process::parse_stat;
using redlock::process::StatFields;

TEST_CASE("parse_stat reads the parent and the start time after the last parenthesis") {
    StatFields f;
    REQUIRE(parse_stat("4242 (we (ird) x) S 17 4242 4242 0 -1 4194560 1 0 0 0 3 1 0 0 20 0 1 "
                       "0 987654 1000 200 18446744073709551615",
                       f));
    CHECK(f.ppid == 17);
    CHECK(f.start_time == 987654);
}

TEST_CASE("parse_stat refuses a line that ends before the start time") {
    StatFields f;
    CHECK_FALSE(parse_stat("4242 (sh) S 17 4242 4242 0", f));
    CHECK_FALSE(parse_stat("no parenthesis at all", f));
    CHECK_FALSE(parse_stat("1 (sh) S x 1 1 0 -1 0 0 0 0 0 0 0 0 0 0 0 0 0 5", f));
}

TEST_CASE("a process's identity names this boot and its start, the same every time") {
    // Two processes started in one clock tick share it: it goes with the pid, never alone.
    auto self = identity(::getpid());
    REQUIRE(self);
    CHECK(self->find('/') != std::string::npos);
    CHECK(*self == *identity(::getpid()));
    CHECK(identity(::getppid()));
    CHECK_FALSE(identity(0x7ffffff0)); // no such process
}

TEST_CASE("is_ancestor accepts the parent with its identity, never with another one") {
    auto parent = identity(::getppid());
    REQUIRE(parent);
    CHECK(is_ancestor(::getppid(), *parent));
    CHECK_FALSE(is_ancestor(::getppid(), *parent + "0"));
    CHECK_FALSE(is_ancestor(::getpid(), *identity(::getpid()))); // not its own ancestor
    CHECK_FALSE(is_ancestor(1, "x"));
}

TEST_CASE("an ancestor running now is the holder; one started after the recorded time is not") {
    using redlock::process::is_ancestor_running_at;
    const auto boot_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             redlock::util::BootClock::now().time_since_epoch())
                             .count();
    const auto wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    CHECK(is_ancestor_running_at(::getppid(), boot_ms, wall_ms));
    // Recorded before the parent started: a later process that took its pid.
    CHECK_FALSE(is_ancestor_running_at(::getppid(), 0, wall_ms));
    // Recorded before this boot.
    CHECK_FALSE(is_ancestor_running_at(::getppid(), boot_ms, 1000));
    CHECK_FALSE(is_ancestor_running_at(::getpid(), boot_ms, wall_ms)); // not its own ancestor
}
