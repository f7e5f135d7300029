// Which holders of a lock `reap` (and a run that finds the lock held) may release: this
// machine's earlier boot only, one per permit and token (lock/reap.hpp).

#include <doctest/doctest.h>

#include "lock/reap.hpp"

namespace {

using redlock::lock::Holder;
using redlock::lock::LockView;
using redlock::lock::ServerView;

Holder here() {
    Holder h;
    h.host = "build-7.example";
    h.pid = 99;
    h.user = "root";
    h.machine = "3d1219c7c4c5404aaa1f6d2a48adfda4";
    h.boot = "1c674c42-fc94-4c84-8e09-d49983c0fe88";
    return h;
}

Holder earlier_boot() {
    auto h = here();
    h.pid = 4242;
    h.boot = "0b0b0b0b-0000-4000-8000-000000000000";
    return h;
}

ServerView held_by(const std::string& token, const Holder& holder) {
    ServerView sv;
    sv.reachable = true;
    sv.token = token;
    sv.holder = holder;
    return sv;
}

} // namespace

TEST_CASE("reapable: the lock of this machine's earlier boot, once for its token") {
    LockView view;
    view.servers = {held_by("t1", earlier_boot()), held_by("t1", earlier_boot()), ServerView{}};
    const auto found = redlock::lock::reapable(view, here());
    REQUIRE(found.size() == 1);
    CHECK(found[0].permit == 0);
    CHECK(found[0].token == "t1");
    CHECK(found[0].holder.pid == 4242);
}

TEST_CASE("reapable: never this boot's lock, another machine's, or one without metadata") {
    LockView view;
    auto other = earlier_boot();
    other.machine = "ffffffffffffffffffffffffffffffff";
    ServerView no_meta;
    no_meta.reachable = true;
    no_meta.token = "t4";
    view.servers = {held_by("t1", here()), held_by("t2", other), no_meta};
    CHECK(redlock::lock::reapable(view, here()).empty());
}

TEST_CASE("reapable: a semaphore's permits of the earlier boot, each by its number") {
    LockView view;
    view.limit = 3;
    view.permits.resize(3);
    view.permits[0].servers = {held_by("a", here())};
    view.permits[1].servers = {held_by("b", earlier_boot())};
    view.permits[2].servers = {held_by("c", earlier_boot())};
    const auto found = redlock::lock::reapable(view, here());
    REQUIRE(found.size() == 2);
    CHECK(found[0].permit == 2);
    CHECK(found[0].token == "b");
    CHECK(found[1].permit == 3);
}
