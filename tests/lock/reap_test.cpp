// Which holders of a lock `reap` (and a run that finds the lock held) may release: one
// naming this machine under another boot, proven by its lease not to have renewed since
// this machine booted; one per permit and token (lock/reap.hpp).

#include <doctest/doctest.h>

#include "lock/reap.hpp"

namespace {

using namespace std::chrono_literals;
using redlock::lock::Holder;
using redlock::lock::Lease;
using redlock::lock::LockView;
using redlock::lock::ServerView;
using redlock::lock::takeover_verdict;
using redlock::lock::ThisBoot;

Holder here() {
    Holder h;
    h.host = "build-7.example";
    h.pid = 99;
    h.user = "root";
    h.machine = "3d1219c7c4c5404aaa1f6d2a48adfda4";
    h.boot = "1c674c42-fc94-4c84-8e09-d49983c0fe88";
    return h;
}

// This machine, up 10 minutes, its boot begun at 2024-05-01T12:00:00Z.
constexpr long long k_booted_ms = 1714564800000;
ThisBoot now() {
    return {here(), 10min, k_booted_ms};
}

// A holder of an earlier boot with a lease of 1 hour (a drift allowance of 36.002 s); its
// boot began a day before this one and it was up an hour when it acquired.
Holder earlier_boot() {
    auto h = here();
    h.pid = 4242;
    h.boot = "0b0b0b0b-0000-4000-8000-000000000000";
    h.ttl_ms = 3600000;
    h.acquired_at = "2024-04-30T13:00:00.000Z";
    h.process = "3600000";
    return h;
}

// Held on a server by `holder` with `pttl` ms of its lease left.
ServerView held_by(const std::string& token, const Holder& holder, long long pttl = 1000000) {
    ServerView sv;
    sv.reachable = true;
    sv.token = token;
    sv.ttl_ms = pttl;
    sv.holder = holder;
    return sv;
}

ServerView free_server() {
    ServerView sv;
    sv.reachable = true;
    return sv;
}

LockView view_of(std::vector<ServerView> servers) {
    LockView view;
    for (const auto& s : servers)
        view.reachable += s.reachable;
    view.servers = std::move(servers);
    return view;
}

Lease lease(std::chrono::milliseconds ago, bool majority = true) {
    return {majority, ago, 3600000};
}

} // namespace

TEST_CASE("takeover: a holder whose lease shows no renewal since this machine booted") {
    // 2600 s of the hour left: renewed 1000 s ago, 400 s before this machine booted.
    const auto view = view_of({held_by("t1", earlier_boot(), 2600000),
                               held_by("t1", earlier_boot(), 2600000), ServerView{}});
    const auto found = redlock::lock::takeovers(view, now());
    REQUIRE(found.size() == 1);
    CHECK(found[0].held.permit == 0);
    CHECK(found[0].held.token == "t1");
    CHECK(found[0].held.holder.pid == 4242);
    CHECK(found[0].lease.renewed_ago == 1000s);
    CHECK(found[0].verdict.take);
    CHECK(found[0].verdict.why ==
          "last renewed 16m 40s ago, before this machine booted (10m 0s ago)");
}

TEST_CASE("takeover: never a holder that renewed after this machine booted") {
    // Renewed 3 s ago: another machine with this machine's identity, alive.
    const auto verdict = takeover_verdict(earlier_boot(), lease(3s), now());
    CHECK_FALSE(verdict.take);
    CHECK(verdict.why == "renewed 3.0s ago, after this machine booted (10m 0s ago): another "
                         "machine with the same identity?");
    // The most recent renewal any server shows counts: one server's older copy does not.
    const auto view = view_of({held_by("t1", earlier_boot(), 2600000),
                               held_by("t1", earlier_boot(), 3597000), free_server()});
    const auto found = redlock::lock::takeovers(view, now());
    REQUIRE(found.size() == 1);
    CHECK(found[0].lease.renewed_ago == 3s);
    CHECK_FALSE(found[0].verdict.take);
}

TEST_CASE("takeover: a renewal within the drift allowance of this boot is too close to tell") {
    // 1% of the hour plus 2 ms: 36.002 s.
    CHECK(redlock::lock::takeover_margin(3600000) == 36002ms);
    CHECK_FALSE(takeover_verdict(earlier_boot(), lease(10min + 36002ms), now()).take);
    CHECK(takeover_verdict(earlier_boot(), lease(10min + 36002ms), now()).why ==
          "renewed 10m 36s ago, within the drift allowance (36.002s) of this machine's boot "
          "(10m 0s ago): too close to tell");
    CHECK(takeover_verdict(earlier_boot(), lease(10min + 36003ms), now()).take);
}

TEST_CASE("takeover: not without a majority of the servers read, nor a lease that tells") {
    CHECK(takeover_verdict(earlier_boot(), lease(1h, false), now()).why ==
          "too few servers answered to tell when it last renewed");
    CHECK(takeover_verdict(earlier_boot(), {true, std::nullopt, 3600000}, now()).why ==
          "its lease does not say when it last renewed (no expiry, or no ttl_ms)");
    // One server of two read out of three: not a majority.
    auto view = view_of({held_by("t1", earlier_boot(), 60000), ServerView{}, ServerView{}});
    CHECK_FALSE(redlock::lock::takeovers(view, now())[0].lease.majority_read);
    // A key with no expiry (-1), or metadata without ttl_ms, on any server holding it.
    auto no_ttl = earlier_boot();
    no_ttl.ttl_ms = 0;
    for (const auto& odd : {held_by("t1", earlier_boot(), -1), held_by("t1", no_ttl, 60000)}) {
        view = view_of({held_by("t1", earlier_boot(), 60000), odd, free_server()});
        const auto found = redlock::lock::takeovers(view, now());
        REQUIRE(found.size() == 1);
        CHECK_FALSE(found[0].lease.renewed_ago);
        CHECK_FALSE(found[0].verdict.take);
    }
}

TEST_CASE("takeover: never a holder whose boot began after this machine's") {
    // Its lease says it renewed before this boot, but its boot began later: whatever
    // misled the lease (a server's clock, a PEXPIRE by hand), it is not an earlier boot.
    auto later = earlier_boot();
    later.acquired_at = "2024-05-01T12:05:00.000Z";
    later.process = "1000"; // began at 12:04:59
    const auto verdict = takeover_verdict(later, lease(1h), now());
    CHECK_FALSE(verdict.take);
    CHECK(verdict.why == "its boot began at 2024-05-01T12:04:59.000Z, after this machine's "
                         "(2024-05-01T12:00:00.000Z): another machine with the same identity?");
    // A holder that does not say (another client's metadata, garbage): the lease alone.
    later.process.clear();
    CHECK(takeover_verdict(later, lease(1h), now()).take);
}

TEST_CASE("takeovers: never this boot's lock, another machine's, or one without metadata") {
    auto other = earlier_boot();
    other.machine = "ffffffffffffffffffffffffffffffff";
    auto clone = earlier_boot(); // a clone of this machine's image, renamed
    clone.host = "build-8.example";
    ServerView no_meta = free_server();
    no_meta.token = "t4";
    const auto view =
        view_of({held_by("t1", here()), held_by("t2", other), held_by("t3", clone), no_meta});
    CHECK(redlock::lock::takeovers(view, now()).empty());
}

TEST_CASE("takeovers: a semaphore's permits of another boot, each by its number") {
    LockView view;
    view.limit = 3;
    view.permits = {view_of({held_by("a", here())}), view_of({held_by("b", earlier_boot())}),
                    view_of({held_by("c", earlier_boot(), 3599000)})};
    const auto found = redlock::lock::takeovers(view, now());
    REQUIRE(found.size() == 2);
    CHECK(found[0].held.permit == 2);
    CHECK(found[0].held.token == "b");
    CHECK(found[0].verdict.take);
    CHECK(found[1].held.permit == 3);
    CHECK_FALSE(found[1].verdict.take); // renewed a second ago
}
