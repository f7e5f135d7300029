#include "lock/reap.hpp"

#include <algorithm>
#include <array>

#include "lock/history.hpp"
#include "lock/lock.hpp"
#include "lock/quorum.hpp"
#include "redis/reply.hpp"
#include "util/random.hpp"

namespace redlock::lock {

namespace {

using namespace std::chrono_literals;

// Adds each permit's holder once (over several servers, each names it).
void add_once(std::vector<HeldBy>& out, size_t permit, const std::string& token,
              const Holder& holder) {
    if (std::ranges::any_of(
            out, [&](const HeldBy& r) { return r.permit == permit && r.token == token; }))
        return;
    out.push_back({permit, token, holder});
}

void add_if_reapable(std::vector<Reapable>& out, size_t permit, const std::string& token,
                     const Holder& holder, const Holder& here) {
    if (of_earlier_boot(holder, here))
        add_once(out, permit, token, holder);
}

void add_view(std::vector<Reapable>& out, size_t permit, const LockView& view, const Holder& here) {
    for (const auto& s : view.servers)
        if (s.token && s.holder)
            add_if_reapable(out, permit, *s.token, *s.holder, here);
}

} // namespace

std::vector<Reapable> reapable(const LockView& view, const Holder& here) {
    std::vector<Reapable> out;
    add_view(out, 0, view, here);
    for (size_t p = 0; p < view.permits.size(); ++p)
        add_view(out, p + 1, view.permits[p], here);
    return out;
}

std::vector<Reapable> reapable(std::span<const HeldBy> seen, const Holder& here) {
    std::vector<Reapable> out;
    for (const auto& s : seen)
        add_if_reapable(out, s.permit, s.token, s.holder, here);
    return out;
}

std::vector<HeldBy> read_holders(std::span<redis::Connection> conns, const Keys& keys,
                                 size_t limit) {
    // The metadata hash of the lock, or of each permit: it names its token.
    std::string request;
    const size_t hashes = std::max<size_t>(limit, 1);
    for (size_t p = limit > 0 ? 1 : 0; p <= limit; ++p) {
        const std::string meta = p == 0 ? keys.meta : keys.permit(p).meta;
        const std::array<std::string_view, 2> argv{"HGETALL", meta};
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
            auto fields = redis::hash_fields(reply);
            const std::string token = fields["token"];
            if (auto holder = parse_holder(fields, token); holder && !token.empty())
                add_once(out, limit > 0 ? i + 1 : 0, token, *holder);
        }
    }
    return out;
}

std::vector<ServerResult> reap(const std::vector<config::ServerConfig>& servers, const Keys& keys,
                               size_t limit, const Reapable& what, const Reaper& by) {
    // The token's own release, as `release --token` would send it: the lock's TTL is of no
    // use here (nothing is renewed).
    Lock lock(servers, keys, what.token, 1s);
    if (limit > 0) {
        lock.set_limit(limit);
        lock.use_permit(what.permit);
    }
    HistoryRecord record;
    record.keep = by.keep;
    record.max_age = by.max_age;
    record.add("run", util::random_token().substr(0, 16));
    record.add("host", what.holder.host);
    record.add("pid", std::to_string(what.holder.pid));
    record.add("user", what.holder.user);
    record.add("command", what.holder.command);
    record.add("outcome", "reaped");
    record.add("by_host", by.who.host);
    record.add("by_pid", std::to_string(by.who.pid));
    record.add("by_user", by.who.user);
    record.add("note", "held by this machine under an earlier boot (" +
                           what.holder.boot.substr(0, 8) + "), acquired " +
                           what.holder.acquired_at);
    return lock.release(Lock::ReleaseWait::every_answer, {}, &record);
}

} // namespace redlock::lock
