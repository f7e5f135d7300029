// --limit N: a semaphore of N permits, each a lock of its own (lock/keys.hpp: a permit's
// keys; lock/scripts.hpp: k_acquire_permit_script and its renew and release). An attempt
// tries every permit in turn, from the one a release just freed or else a random one, and
// takes the first it can; it stops when a majority says every permit is held.
#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "lock/lock.hpp"
#include "lock/scripts.hpp"
#include "redis/fanout.hpp"
#include "util/format.hpp"
#include "util/random.hpp"

namespace redlock::lock {

using Vote = ServerResult::Vote;

void Lock::set_limit(size_t permits) {
    m_limit = permits;
    use_permit(1);
}

void Lock::use_permit(size_t permit) {
    m_permit = permit;
    auto keys = m_name.permit(permit);
    m_keys = {std::move(keys.lock), std::move(keys.meta), std::move(keys.fence_field),
              std::move(keys.old_fence)};
    forget_renewal();
}

std::string Lock::release_channel() const {
    return m_name.released;
}

std::string Lock::events_channel() const {
    return m_name.events;
}

std::vector<std::string> Lock::script_keys() const {
    if (m_limit == 0)
        return {m_keys.lock, m_keys.meta, m_name.record};
    return {m_keys.lock, m_keys.meta, m_name.record, m_name.lock, m_name.limit};
}

std::array<std::string, 3> Lock::fence_args() const {
    return {std::to_string(m_record_age.count()), std::to_string(m_slot.count()),
            m_keys.fence_field};
}

const Script& Lock::renew_script() const {
    return m_limit == 0 ? k_renew_script : k_renew_permit_script;
}

util::Expected<AcquireResult> Lock::acquire(int interrupt_fd, bool leader_first,
                                            const HistoryRecord* skip) {
    m_known_position.reset(); // listed()'s, for the waiting line of the attempt before
    if (m_limit == 0) {
        auto attempt = acquire_key(interrupt_fd, leader_first, skip);
        if (skip)
            note_history();
        return attempt;
    }
    // Every permit in turn, from the one a release just freed, or else a random one
    // (contenders spread over them), until one is ours. All held: "held", with the
    // servers' answers for the permit that frees first.
    const size_t preferred = std::exchange(m_preferred_permit, 0);
    const size_t first =
        preferred >= 1 && preferred <= m_limit ? preferred - 1 : util::random_index(m_limit);
    std::optional<AcquireResult> soonest;
    auto frees_in = [](const AcquireResult& r) {
        long long least = std::numeric_limits<long long>::max();
        for (const auto& s : r.servers)
            if (s.held_pttl >= 0)
                least = std::min(least, s.held_pttl);
        return least;
    };
    for (size_t k = 0; k < m_limit; ++k) {
        use_permit((first + k) % m_limit + 1);
        // A refusal is recorded with the last permit tried: by then every one was held.
        auto attempt = acquire_key(interrupt_fd, false, k + 1 == m_limit ? skip : nullptr);
        if (skip && k + 1 == m_limit)
            note_history();
        if (!attempt || attempt->status != AcquireStatus::held)
            return attempt;
        const auto full = std::ranges::count_if(
            attempt->servers, [](const ServerResult& s) { return s.every_permit_held; });
        if (!soonest || frees_in(*attempt) < frees_in(*soonest))
            soonest = std::move(*attempt);
        // Every permit held on a majority: none other is tried (but for a refusal to
        // record, which goes with the last permit tried).
        if (!skip && static_cast<size_t>(full) >= majority_of(m_conns.size()))
            break;
    }
    return *soonest;
}

} // namespace redlock::lock
