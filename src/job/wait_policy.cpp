#include "job/wait_policy.hpp"

#include <algorithm>
#include <limits>

#include "lock/lock.hpp"

namespace redlock::job {

using namespace std::chrono_literals;

std::optional<Millis> until_expiry(const std::vector<lock::ServerResult>& servers) {
    const size_t majority = lock::majority_of(servers.size());
    size_t free = 0;
    std::vector<long long> held;
    for (const auto& s : servers) {
        if (s.vote == lock::ServerResult::Vote::yes) // released again by the failed attempt
            ++free;
        else if (s.vote == lock::ServerResult::Vote::no)
            held.push_back(s.held_pttl == -1 ? std::numeric_limits<long long>::max()
                                             : std::max(s.held_pttl, 0LL));
    }
    if (free >= majority)
        return Millis(0);
    size_t need = majority - free;
    if (need > held.size())
        return std::nullopt;
    std::ranges::sort(held);
    if (held[need - 1] == std::numeric_limits<long long>::max())
        return std::nullopt;
    return Millis(held[need - 1]);
}

Clock::time_point sleep_until(const SleepInput& in, const Jitter& jitter) {
    Clock::time_point until;
    if (in.too_slow || !in.listening)
        until = in.now + jitter(20ms, 200ms);
    else
        until = in.now + std::min<Millis>(in.expiry.value_or(1s), 1h) + jitter(1ms, 20ms);
    if (in.fair) // each attempt keeps our place in the queue alive
        until = std::min(until, in.now + lock::Lock::k_fair_heartbeat);
    if (in.give_up)
        until = std::min(until, *in.give_up);
    return until;
}

Micros backoff_unit(Clock::duration round_trip) {
    return std::max<Micros>(std::chrono::ceil<Micros>(round_trip), 200us);
}

Micros spread_window(const SpreadInput& in) {
    const auto unit = backoff_unit(in.round_trip);
    Micros window{0};
    // Each waiter listens to `listened` of the N servers: one counts about that share of
    // the waiters.
    if (in.herd && *in.herd > 0) {
        const auto all = *in.herd * static_cast<long long>(in.servers) /
                         static_cast<long long>(std::max<size_t>(in.listened, 1));
        if (all > 1)
            window = std::min<Micros>(unit * (all - 1), 1s);
    }
    if (in.collided > 0) {
        const auto cap = std::max<Micros>(unit * 32, 20ms);
        window = std::max(
            window, std::min<Micros>(unit * (1L << std::min<size_t>(in.collided - 1, 16)), cap));
    }
    return window;
}

} // namespace redlock::job
