#pragma once
// Reaping: releasing what this machine held under an earlier boot. The holder's metadata
// names its machine and boot (lock/holder.hpp); a lock (or a --limit permit) held by this
// machine under an earlier boot is held by nobody: nothing of that boot can still run. It
// is released at once with its own token, wherever that token still holds it
// (compare-and-delete: a lock taken meanwhile by anyone is never touched), waking the
// waiters as any release does, with the history entry `reaped`. `redlock reap` does it for
// every lock (at boot: packaging/examples/redlock-reap.service); a run that finds its lock
// so held does it for that lock before it tries again (job/acquire.cpp). A lock of another
// machine, or of this machine's current boot, is never reaped.

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "lock/holder.hpp"
#include "lock/inspect.hpp"
#include "lock/keys.hpp"
#include "lock/round.hpp"
#include "redis/connection.hpp"

namespace redlock::lock {

// A holder as its metadata names it: the lock's own (permit 0), or permit 1..N's of a
// --limit name.
struct HeldBy {
    size_t permit = 0;
    std::string token;
    Holder holder;
};
// One that can be reaped.
using Reapable = HeldBy;

// The holders shown in `view` (on each server; each permit's on each server) that are
// `here`'s machine under an earlier boot, one per permit and token.
[[nodiscard]] std::vector<Reapable> reapable(const LockView& view, const Holder& here);

// For a run that found the lock `keys` held (every permit of a --limit name of `limit`
// permits): who holds it, as the metadata alone says, one HGETALL per hash on every server
// in one write, decided once every server answered, or a majority and a moment more. One
// per permit and token, in the order of the servers. A waiting run's look at the first
// "held" serves both the takeover (reapable below) and its "waiting for" line; later looks
// the line alone (job/acquire.cpp).
[[nodiscard]] std::vector<HeldBy> read_holders(std::span<redis::Connection> conns, const Keys& keys,
                                               size_t limit);
// Those of `seen` that are `here`'s machine under an earlier boot.
[[nodiscard]] std::vector<Reapable> reapable(std::span<const HeldBy> seen, const Holder& here);

// Who reaps, for the history entry (by_host, by_pid, by_user), and its settings.
struct Reaper {
    Holder who;
    size_t keep = 300;
    std::chrono::milliseconds max_age{24 * 3600000};
};

// Releases `what` of the lock `keys` (with `limit` permits, 0 for a plain lock) on
// `servers`, with the history entry `reaped`. Returns each server's answer: yes where it
// was released, no where the token no longer held it.
std::vector<ServerResult> reap(const std::vector<config::ServerConfig>& servers, const Keys& keys,
                               size_t limit, const Reapable& what, const Reaper& by);

} // namespace redlock::lock
