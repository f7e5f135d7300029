#include "lock/reap.hpp"

#include <algorithm>
#include <array>
#include <map>

#include "lock/history.hpp"
#include "lock/lock.hpp"
#include "lock/quorum.hpp"
#include "redis/reply.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"
#include "util/format.hpp"
#include "util/random.hpp"
#include "util/timestamp.hpp"

namespace redlock::lock {

namespace {

using namespace std::chrono_literals;
using Millis = std::chrono::milliseconds;

// Adds each permit's holder once (over several servers, each names it).
void add_once(std::vector<HeldBy>& out, size_t permit, const std::string& token,
              const Holder& holder) {
    if (std::ranges::any_of(
            out, [&](const HeldBy& r) { return r.permit == permit && r.token == token; }))
        return;
    out.push_back({permit, token, holder});
}

// `token`'s lease as the servers of `view` show it (Lease).
Lease lease_of(const LockView& view, const std::string& token) {
    Lease lease;
    lease.majority_read = view.reachable >= majority_of(view.servers.size());
    bool told = true;
    for (const auto& s : view.servers) {
        if (!s.reachable || s.token != token)
            continue;
        const long long ttl = s.holder ? s.holder->ttl_ms : 0;
        // ttl_ms as another client may have written it: believed only when plausible.
        if (ttl <= 0 || !util::plausible_ms(ttl) || s.ttl_ms < 0) {
            told = false;
            continue;
        }
        const Millis ago(std::max(ttl - s.ttl_ms, 0LL));
        lease.renewed_ago = lease.renewed_ago ? std::min(*lease.renewed_ago, ago) : ago;
        lease.ttl_ms = std::max(lease.ttl_ms, ttl);
    }
    if (!told)
        lease.renewed_ago.reset();
    return lease;
}

void add_view(std::vector<Takeover>& out, size_t permit, const LockView& view,
              const ThisBoot& now) {
    for (const auto& s : view.servers) {
        if (!s.token || !s.holder || !of_another_boot(*s.holder, now.here) ||
            std::ranges::any_of(out, [&](const Takeover& t) {
                return t.held.permit == permit && t.held.token == *s.token;
            }))
            continue;
        Takeover t{{permit, *s.token, *s.holder}, lease_of(view, *s.token), {}};
        t.verdict = takeover_verdict(t.held.holder, t.lease, now);
        out.push_back(std::move(t));
    }
}

std::string when(long long unix_ms) {
    return util::format_utc_timestamp(util::UtcMillis(Millis(unix_ms)));
}

} // namespace

bool any_of_another_boot(std::span<const HeldBy> seen, const Holder& here) {
    return std::ranges::any_of(seen,
                               [&](const HeldBy& s) { return of_another_boot(s.holder, here); });
}

ThisBoot this_boot(const Holder& here) {
    // Both clocks read together: the boot began at the wall clock's now less the uptime.
    const auto up = std::chrono::floor<Millis>(util::BootClock::now().time_since_epoch());
    const auto wall = std::chrono::floor<Millis>(std::chrono::system_clock::now());
    return {here, up, (wall.time_since_epoch() - up).count()};
}

Millis takeover_margin(long long ttl_ms) {
    return Millis(ttl_ms / 100 + 2);
}

TakeoverVerdict takeover_verdict(const Holder& holder, const Lease& lease, const ThisBoot& now) {
    constexpr const char* k_clone = "another machine with the same identity?";
    if (!lease.majority_read)
        return {false, "too few servers answered to tell when it last renewed"};
    if (!lease.renewed_ago)
        return {false, "its lease does not say when it last renewed (no expiry, or no ttl_ms)"};
    const Millis ago = *lease.renewed_ago;
    const Millis up = now.uptime;
    if (ago <= up)
        return {false, util::format("renewed {} ago, after this machine booted ({} ago): {}",
                                    util::human_duration(ago), util::human_duration(up), k_clone)};
    const Millis margin = takeover_margin(lease.ttl_ms);
    if (ago <= up + margin)
        return {false, util::format("renewed {} ago, within the drift allowance ({}) of this "
                                    "machine's boot ({} ago): too close to tell",
                                    util::human_duration(ago), util::format_duration(margin),
                                    util::human_duration(up))};
    // The lease says: before this boot. A holder that says when its boot began must have
    // begun it before this one, on the wall clock of the machine it names.
    if (const auto began = boot_started_ms(holder); began && *began >= now.booted_ms)
        return {false, util::format("its boot began at {}, after this machine's ({}): {}",
                                    when(*began), when(now.booted_ms), k_clone)};
    return {true, util::format("last renewed {} ago, before this machine booted ({} ago)",
                               util::human_duration(ago), util::human_duration(up))};
}

std::vector<Takeover> takeovers(const LockView& view, const ThisBoot& now) {
    std::vector<Takeover> out;
    add_view(out, 0, view, now);
    for (size_t p = 0; p < view.permits.size(); ++p)
        add_view(out, p + 1, view.permits[p], now);
    return out;
}

std::vector<HeldBy> read_holders(std::span<redis::Connection> conns, const Keys& keys,
                                 size_t limit) {
    // The metadata hash of the lock, or of each permit: it names its token. Only the fields
    // redlock reads: a hash of another client's may have any number.
    std::string request;
    const size_t hashes = std::max<size_t>(limit, 1);
    for (size_t p = limit > 0 ? 1 : 0; p <= limit; ++p) {
        const std::string meta = p == 0 ? keys.meta : keys.permit(p).meta;
        std::array<std::string_view, 2 + k_holder_field_names.size()> argv{"HMGET", meta};
        std::ranges::copy(k_holder_field_names, argv.begin() + 2);
        request += redis::encode_command(argv);
    }
    const auto now = redis::Clock::now();
    for (auto& c : conns)
        c.start_pipelined(request, hashes - 1, now);
    // A frozen server must not hold up a run that found the lock held.
    wait_for_answers(conns, majority_of(conns.size()));
    std::vector<HeldBy> out;
    for (const auto& c : conns) {
        const auto& outcome = c.outcome();
        if (c.busy() || !outcome || !outcome->reply || outcome->trailing.size() != hashes - 1)
            continue;
        for (size_t i = 0; i < hashes; ++i) {
            const auto& reply = i == 0 ? *outcome->reply : *outcome->trailing[i - 1];
            if (reply.type != REDIS_REPLY_ARRAY || reply.elements != k_holder_field_names.size())
                continue;
            std::map<std::string, std::string> fields;
            for (size_t f = 0; f < reply.elements; ++f)
                if (reply.element[f]->type == REDIS_REPLY_STRING)
                    fields.emplace(k_holder_field_names[f], redis::text(*reply.element[f]));
            const std::string token = fields["token"];
            if (auto holder = parse_holder(fields, token); holder && !token.empty())
                add_once(out, limit > 0 ? i + 1 : 0, token, *holder);
        }
    }
    return out;
}

std::vector<ServerResult> reap(const std::vector<config::ServerConfig>& servers, const Keys& keys,
                               size_t limit, const Takeover& what, const Reaper& by) {
    // The token's own release, as `release --token` would send it: the lock's TTL is of no
    // use here (nothing is renewed).
    const auto& held = what.held;
    Lock lock(servers, keys, held.token, 1s);
    if (limit > 0) {
        lock.set_limit(limit);
        lock.use_permit(held.permit);
    }
    HistoryRecord record;
    record.keep = by.keep;
    record.max_age = by.max_age;
    record.add("run", util::random_token().substr(0, 16));
    record.add("host", held.holder.host);
    record.add("pid", std::to_string(held.holder.pid));
    record.add("user", held.holder.user);
    record.add("command", held.holder.command);
    record.add("outcome", "reaped");
    record.add("by_host", by.who.host);
    record.add("by_pid", std::to_string(by.who.pid));
    record.add("by_user", by.who.user);
    record.add("note", "held by this machine under an earlier boot (" +
                           held.holder.boot.substr(0, 8) + "), acquired " +
                           held.holder.acquired_at + ", " + what.verdict.why);
    return lock.release(Lock::ReleaseWait::every_answer, {}, &record);
}

} // namespace redlock::lock
