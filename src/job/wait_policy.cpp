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
        until = in.now + std::min<Millis>(in.expiry.value_or(1s), 1min) + jitter(1ms, 20ms);
    if (in.fair) // each attempt keeps our place in the queue alive
        until = std::min(until, in.now + lock::Lock::k_fair_heartbeat);
    if (in.give_up)
        until = std::min(until, *in.give_up);
    return until;
}

} // namespace redlock::job
