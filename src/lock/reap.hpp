#pragma once
// Reaping: releasing what this machine held under an earlier boot. The holder's metadata
// names its machine and boot (lock/holder.hpp); a lock (or a --limit permit) held by this
// machine under an earlier boot is held by nobody: nothing of that boot can still run. But
// a holder naming this machine (machine id and host name) under another boot may as well
// be another machine with the same identity (a clone not renamed, a pod of one name in two
// clusters), alive: a takeover needs proof that the holder has not renewed since this
// machine booted (takeover_verdict, the one rule). A holder so proven is released at once
// with its own token, wherever that token still holds it (compare-and-delete: a lock taken
// meanwhile by anyone is never touched), waking the waiters as any release does, with the
// history entry `reaped`. `redlock reap` does it for every lock (at boot:
// packaging/examples/redlock-reap.service); a run that finds its lock so held does it for
// that lock before it tries again (job/acquire.cpp). A lock of another machine, of this
// machine's current boot, or of a holder that renewed since this machine booted is never
// reaped.

#include <chrono>
#include <optional>
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

// For a run that found the lock `keys` held (every permit of a --limit name of `limit`
// permits): who holds it, as the metadata alone says, one HMGET per hash on every server
// in one write, decided once every server answered, or a majority and a moment more. One
// per permit and token, in the order of the servers. A waiting run's look at the first
// "held" serves both the question of a takeover (of_another_boot) and its "waiting for"
// line; later looks the line alone (job/acquire.cpp).
[[nodiscard]] std::vector<HeldBy> read_holders(std::span<redis::Connection> conns, const Keys& keys,
                                               size_t limit);
// Whether any of `seen` names `here`'s machine under another boot (of_another_boot): then
// the lock is read with its lease (inspect) and judged by takeover_verdict.
[[nodiscard]] bool any_of_another_boot(std::span<const HeldBy> seen, const Holder& here);

// This machine when a takeover is decided: who it is (machine, host name, boot; and who
// reaps, for the history entry), how long it has been up (CLOCK_BOOTTIME, suspend
// included), and when its boot began on its wall clock (Unix ms).
struct ThisBoot {
    Holder here;
    std::chrono::milliseconds uptime{0};
    long long booted_ms = 0;
};
[[nodiscard]] ThisBoot this_boot(const Holder& here);

// What the servers read tell of a holder's lease. The last renewal (or the acquisition,
// or an `extend`) set the lock's TTL to the holder's ttl_ms on each server, so on each
// that still holds its token it was ttl_ms - PTTL ago, counted by that server's clock.
struct Lease {
    // The servers read were a majority of them: a renewal that counted reached a majority,
    // so one of those read shows it.
    bool majority_read = false;
    // Since the most recent renewal any server holding the token shows; nullopt when one
    // of them cannot tell (the key has no expiry, or its metadata no ttl_ms).
    std::optional<std::chrono::milliseconds> renewed_ago;
    long long ttl_ms = 0; // the holder's lease, for the drift allowance
};

// The margin the rule keeps between the last renewal and this machine's boot: the drift
// allowance of the holder's lease (lock/round.cpp): 1% of it plus 2 ms. The renewal's age
// is counted by a server's clock, the uptime by this machine's; both are durations back
// from now, so no offset between the clocks enters, only their rates.
[[nodiscard]] std::chrono::milliseconds takeover_margin(long long ttl_ms);

struct TakeoverVerdict {
    bool take = false;
    // Taken: when it last renewed, against this boot ("last renewed 6m 0s ago, before this
    // machine booted (2m 0s ago)"). Not: why not, for the user.
    std::string why;
};

// The one rule of `redlock reap` and of a run's takeover, for a holder that names this
// machine under another boot (of_another_boot): take it over only when its lease proves
// that it has not renewed since this machine booted (renewed longer ago than this machine
// has been up, by more than takeover_margin), on a majority of the servers, and, where its
// metadata says when its boot began (boot_started_ms), that boot began before this one.
[[nodiscard]] TakeoverVerdict takeover_verdict(const Holder& holder, const Lease& lease,
                                               const ThisBoot& now);

// A holder of another boot found in a lock, with the verdict.
struct Takeover {
    HeldBy held;
    Lease lease;
    TakeoverVerdict verdict;
};

// The holders shown in `view` (on each server; each permit's on each server) that name
// `now`'s machine under another boot, one per permit and token, each with its lease as
// the view's servers show it and the verdict of takeover_verdict.
[[nodiscard]] std::vector<Takeover> takeovers(const LockView& view, const ThisBoot& now);

// Who reaps, for the history entry (by_host, by_pid, by_user), and its settings.
struct Reaper {
    Holder who;
    size_t keep = 300;
    std::chrono::milliseconds max_age{24 * 3600000};
};

// Releases `what` (taken over by takeover_verdict) of the lock `keys` (with `limit`
// permits, 0 for a plain lock) on `servers`, with the history entry `reaped`. Returns each
// server's answer: yes where it was released, no where the token no longer held it.
std::vector<ServerResult> reap(const std::vector<config::ServerConfig>& servers, const Keys& keys,
                               size_t limit, const Takeover& what, const Reaper& by);

} // namespace redlock::lock
