#include <optional>
#include <string>

#include <doctest/doctest.h>

#include "job/nested.hpp"
#include "lock/holder.hpp"

using redlock::job::nesting_refusal;
using redlock::job::NestingClaim;
using redlock::lock::Holder;

namespace {

const std::string k_secret = "00112233445566778899aabbccddeeff";

Holder holder() {
    Holder h;
    h.host = "web-1";
    h.pid = 7;
    h.process = "123456";
    h.acquired_at = "2026-12-06T10:00:00.000Z";
    h.pid_ns = "4026531836";
    h.nest = redlock::lock::nest_digest(k_secret);
    return h;
}

bool ancestor(const Holder&) {
    return true;
}

bool stranger(const Holder&) {
    return false;
}

} // namespace

TEST_CASE("a run with the holder's secret, host and pid namespace, below its holder, is nested") {
    CHECK_FALSE(nesting_refusal(holder(), {k_secret, "web-1", "4026531836"}, ancestor));
}

TEST_CASE("the token alone does not make a nested run: the secret must be shown") {
    CHECK(nesting_refusal(holder(), {"", "web-1", "4026531836"}, ancestor) ==
          "REDLOCK_NEST_SECRET is not set");
    CHECK(nesting_refusal(holder(), {"00112233445566778899aabbccddeefe", "web-1", "4026531836"},
                          ancestor) == "REDLOCK_NEST_SECRET is not its holder's");
    // The digest the servers keep is not the secret either.
    CHECK(nesting_refusal(holder(), {holder().nest, "web-1", "4026531836"}, ancestor) ==
          "REDLOCK_NEST_SECRET is not its holder's");
}

TEST_CASE("another pid namespace is refused, whatever its pids: a container's 7 is not ours") {
    CHECK(nesting_refusal(holder(), {k_secret, "web-1", "4026532001"}, ancestor) ==
          "its holder runs in another pid namespace");
    auto unknown = holder();
    unknown.pid_ns.clear();
    CHECK(nesting_refusal(unknown, {k_secret, "web-1", "4026531836"}, ancestor) ==
          "its holder runs in another pid namespace");
}

TEST_CASE("another host, a holder without a secret, or no such ancestor is refused") {
    CHECK(nesting_refusal(holder(), {k_secret, "web-2", "4026531836"}, ancestor) ==
          "its holder runs on web-1");
    auto old = holder();
    old.nest.clear();
    CHECK(nesting_refusal(old, {k_secret, "web-1", "4026531836"}, ancestor) ==
          "its holder gave no nesting secret (another client, or an older redlock)");
    CHECK(nesting_refusal(holder(), {k_secret, "web-1", "4026531836"}, stranger) ==
          "its holder, pid 7, is not an ancestor of this process");
    auto no_time = holder();
    no_time.process.clear();
    CHECK(nesting_refusal(no_time, {k_secret, "web-1", "4026531836"}, ancestor) ==
          "its holder, pid 7, is not an ancestor of this process");
}
