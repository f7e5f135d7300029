#include <chrono>
#include <optional>
#include <poll.h>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "config/server_url.hpp"
#include "redis/subscription.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using redlock::config::ServerConfig;
using redlock::redis::Subscription;
using redlock::test::RedisServer;

namespace {

constexpr char k_channel[] = "{lock:job}:released";

ServerConfig server_config(const std::string& url) {
    auto parsed = redlock::config::parse_server_url(url);
    REQUIRE_MESSAGE(parsed, url);
    return ServerConfig{*parsed, 5s, 5s, {}, {}, 0, {}, {}};
}

// Publishes `payload` on `server` and reports whether the subscription woke for it: it
// polls until the message has been read (the server says one subscriber received it, and
// it arrives within the bound), then for a short while more, so that a wake-up that should
// not happen has its chance to.
bool wakes(Subscription& sub, const RedisServer& server, const std::string& payload) {
    REQUIRE(server.command({"PUBLISH", k_channel, payload}) == "1");
    bool woken = false;
    for (int rounds = 0; rounds < 20; ++rounds) {
        std::vector<pollfd> fds;
        sub.add_pollfds(fds);
        int rc = ::poll(fds.data(), fds.size(), rounds == 0 ? 5000 : 10);
        if (rc > 0)
            woken |= sub.on_events(fds);
        else if (rounds > 0)
            break;
    }
    return woken;
}

// Kills `server` and reports whether the subscription woke for its closed connection.
bool wakes_when_killed(Subscription& sub, RedisServer& server) {
    server.kill();
    std::vector<pollfd> fds;
    sub.add_pollfds(fds);
    REQUIRE(::poll(fds.data(), fds.size(), 5000) > 0);
    return sub.on_events(fds);
}

// Two servers, both subscribed to; the first is the primary when a grace is given.
struct TwoServers {
    RedisServer a;
    RedisServer b;
    Subscription sub{{server_config(a.url()), server_config(b.url())}, k_channel};

    explicit TwoServers(std::optional<std::chrono::milliseconds> primary_grace = std::nullopt) {
        if (primary_grace)
            sub.set_primary(0, *primary_grace);
        sub.subscribe();
        REQUIRE(sub.live() == 2);
    }
};

} // namespace

TEST_CASE("without a primary server a release wakes once a majority has announced it") {
    TwoServers two;
    auto& [a, b, sub] = two;

    // One of two: the release may not have reached a majority yet.
    CHECK_FALSE(wakes(sub, a, "released 0123456789ab"));
    CHECK(wakes(sub, b, "released 0123456789ab"));
    // Heard again (a server announcing twice): no news.
    CHECK_FALSE(wakes(sub, a, "released 0123456789ab"));
    CHECK(wakes(sub, a, "released"));       // 0.1's releases say no id
    CHECK(wakes(sub, b, "4"));              // nor a bare count
    CHECK_FALSE(wakes(sub, a, "acquired")); // someone won: nothing to wake for
}

TEST_CASE("without a primary server a release only one server announced is news after a grace") {
    TwoServers two;
    auto& [a, b, sub] = two;
    CHECK_FALSE(wakes(sub, a, "released 0123456789ab")); // b frozen, or cut off: say
    auto deadline = sub.next_deadline();
    REQUIRE(deadline.has_value());
    CHECK_FALSE(sub.expire(*deadline - 1ms));
    CHECK(sub.expire(*deadline));
    CHECK_FALSE(sub.next_deadline().has_value());
    CHECK_FALSE(wakes(sub, b, "released 0123456789ab")); // late: told already
}

TEST_CASE("without a primary server, a majority of those still subscribed") {
    TwoServers two;
    auto& [a, b, sub] = two;
    CHECK(wakes_when_killed(sub, a));
    CHECK(wakes(sub, b, "released 0123456789ab"));
}

TEST_CASE("with a primary server a release wakes once, when the primary announces it") {
    TwoServers two(1h); // no grace runs out during this test
    auto& [a, b, sub] = two;

    // The other server first: the release may not have reached the primary yet.
    CHECK_FALSE(wakes(sub, b, "3 0123456789ab"));
    CHECK(sub.next_deadline().has_value());
    CHECK(wakes(sub, a, "3 0123456789ab"));
    CHECK_FALSE(sub.next_deadline().has_value());
    // The primary first: the other server's notice of the same release is no news.
    CHECK(wakes(sub, a, "2 ba9876543210"));
    CHECK_FALSE(wakes(sub, b, "2 ba9876543210"));
    CHECK_FALSE(sub.next_deadline().has_value());
    // Without an id nothing can be matched: it wakes.
    CHECK(wakes(sub, b, "released"));
}

TEST_CASE("with a primary server another server's notice wakes once its grace has passed") {
    TwoServers two(50ms);
    auto& [a, b, sub] = two;

    CHECK(wakes(sub, a, "acquired") == false);
    CHECK_FALSE(wakes(sub, b, "1 0123456789ab")); // the primary's release failed, say
    auto deadline = sub.next_deadline();
    REQUIRE(deadline.has_value());
    CHECK_FALSE(sub.expire(*deadline - 1ms));
    CHECK(sub.expire(*deadline));
    CHECK_FALSE(sub.next_deadline().has_value());
    // The primary's late notice of it still wakes: an attempt there can now succeed.
    CHECK(wakes(sub, a, "1 0123456789ab"));
}

TEST_CASE("with the primary's subscription gone, another server's notice wakes at once") {
    TwoServers two(1h);
    auto& [a, b, sub] = two;
    // The closed connection wakes (and counts as lost), then b's notice is news at once.
    CHECK(wakes_when_killed(sub, a));
    CHECK(sub.lost());
    CHECK(wakes(sub, b, "1 0123456789ab"));
}

TEST_CASE("after hear_again another server's late notice of a release is news again") {
    SUBCASE("with a primary: after its grace") {
        TwoServers two(50ms);
        auto& [a, b, sub] = two;
        CHECK(wakes(sub, a, "released 0123456789ab"));
        // The attempt it set off found b still held: b's notice, when it comes, says why.
        sub.hear_again();
        CHECK_FALSE(wakes(sub, b, "released 0123456789ab"));
        auto deadline = sub.next_deadline();
        REQUIRE(deadline.has_value());
        CHECK(sub.expire(*deadline));
    }
    SUBCASE("without one: from a majority again") {
        TwoServers two;
        auto& [a, b, sub] = two;
        CHECK_FALSE(wakes(sub, a, "released 0123456789ab"));
        CHECK(wakes(sub, b, "released 0123456789ab"));
        sub.hear_again();
        CHECK_FALSE(wakes(sub, a, "released 0123456789ab"));
        CHECK(wakes(sub, b, "released 0123456789ab"));
    }
    SUBCASE("without it, no news") {
        TwoServers two(1h);
        auto& [a, b, sub] = two;
        CHECK(wakes(sub, a, "released 0123456789ab"));
        CHECK_FALSE(wakes(sub, b, "released 0123456789ab"));
        CHECK_FALSE(sub.next_deadline().has_value());
    }
}

TEST_CASE("a permit's release names the permit it freed, to the first in line only") {
    TwoServers two;
    auto& [a, b, sub] = two;
    CHECK_FALSE(wakes(sub, a, "released 0123456789ab p3"));
    CHECK(wakes(sub, b, "released 0123456789ab p3")); // the same release: one ID
    CHECK(sub.take_freed_permit() == 3);
    CHECK(sub.take_freed_permit() == 0);             // told once
    (void)wakes(sub, a, "released 0123456789ab p3"); // a late copy: no news
    CHECK(sub.take_freed_permit() == 0);
    // Two releases heard before it tried: the first one's permit (the second release woke
    // another first, for its own).
    for (const char* notice : {"released 3123456789ab p1", "released 4123456789ab p4"}) {
        CHECK_FALSE(wakes(sub, a, notice));
        CHECK(wakes(sub, b, notice));
    }
    CHECK(sub.take_freed_permit() == 1);
    // Second in line: it only looks a moment later, and is told the permit then (the
    // first in line may have taken it: it looks first, Lock::looks_free).
    CHECK_FALSE(wakes(sub, a, "released 1123456789ab p2 next"));
    CHECK(sub.take_freed_permit() == 0);
    REQUIRE(sub.next_deadline().has_value());
    CHECK(sub.expire(*sub.next_deadline()));
    CHECK(sub.standby_woke());
    CHECK(sub.take_freed_permit() == 2);
    // Not a permit's number: part of the ID, as an older waiter reads it.
    CHECK_FALSE(wakes(sub, a, "released 2123456789ab px"));
    CHECK(wakes(sub, b, "released 2123456789ab px"));
    CHECK(sub.take_freed_permit() == 0);
}
