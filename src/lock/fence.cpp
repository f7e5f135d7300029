// Round 2 of an acquisition over several servers, when the round-1 replies differ: the
// fence (the largest counter among the yes replies) is written back where round 1 said
// yes, and counts once a majority of all the servers confirmed it. lock/lock.hpp says why
// this keeps fences growing; tests/model checks it exhaustively.
#include <algorithm>
#include <array>
#include <limits>

#include "lock/lock.hpp"
#include "lock/scripts.hpp"
#include "redis/fanout.hpp"
#include "util/format.hpp"
#include "util/random.hpp"

namespace redlock::lock {

using Vote = ServerResult::Vote;

bool Lock::write_fence(const std::vector<size_t>& yes_servers, long long fence, int interrupt_fd,
                       std::vector<ServerResult>& results) {
    // Always EVAL: a server that never saw this script (first contact, restarted empty)
    // would answer an EVALSHA with NOSCRIPT, and the fallback of a write not waited for
    // once a majority confirmed would never be sent, leaving its copy of the fence out.
    const auto [age, slot, field] = fence_args();
    const std::array<std::string, 5> args{m_token, std::to_string(fence), field, age, slot};
    const std::array<std::string, 3> keys{m_keys.lock, m_keys.meta, m_name.record};
    auto command = script_call(k_fence_script, false, keys, args);
    std::vector<bool> to(m_conns.size(), false);
    for (size_t i : yes_servers)
        to[i] = true;
    send_writes(command, {}, Clock::now(), to);
    // Judged by all N servers' majority, counting only the ones that said yes in round 1:
    // the others cannot confirm, and count as failed.
    auto count = [&] {
        Tally t{m_conns.size(), 0, 0, 0};
        for (size_t i : yes_servers)
            t.yes += classify(m_conns[i]).vote == Vote::yes;
        size_t open = 0;
        for (size_t i : yes_servers)
            open += classify(m_conns[i]).vote == Vote::none;
        t.failed = t.total - t.yes - open;
        return t;
    };
    (void)redis::wait(
        m_conns, [&] { return count().decided(); }, interrupt_fd);
    for (size_t i : yes_servers) {
        auto r = classify(m_conns[i]);
        results[i].latency += r.latency;
        if (r.vote != Vote::yes) {
            // The round-1 yes no longer counts: the acquisition is judged on round 2.
            results[i].vote = r.vote == Vote::none ? Vote::failed : r.vote;
            results[i].failed_in_round2 = r.vote == Vote::failed && !r.abandoned;
            results[i].detail = r.vote == Vote::no ? "lost before the fence was written"
                                                   : "fence not written: " + r.detail;
        }
    }
    return count().won();
}

} // namespace redlock::lock
