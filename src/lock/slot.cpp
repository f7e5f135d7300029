// --once-per: a run claims the current slot of the name before PROGRAM starts, and records
// how it ended; a slot already run (or being run) ends a run as a lock held elsewhere
// does (lock/scripts.hpp, k_claim_slot_script and k_finish_slot_script).
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

Lock::SlotClaim Lock::claim_slot(Millis length, Millis early, std::string_view run,
                                 std::span<const std::string> fields) {
    const std::array<std::string, 3> keys{m_keys.lock, m_name.record, m_name.old_slot};
    std::vector<std::string> args{m_token, std::to_string(length.count()),
                                  std::to_string(early.count()),
                                  std::to_string(m_record_age.count()), std::string(run)};
    args.insert(args.end(), fields.begin(), fields.end());
    send_all(script_call(k_claim_slot_script, true, keys, args),
             script_call(k_claim_slot_script, false, keys, args), Clock::now());
    // Yes: claimed here; no: this slot's run is recorded here.
    auto count = [&] {
        Tally t{m_conns.size(), 0, 0, 0};
        for (const auto& c : m_conns) {
            t.yes += integer_reply(c) == 1;
            t.no += integer_reply(c) == -1;
        }
        return t;
    };
    (void)redis::wait(m_conns, [&] { return count().won() || count().refused(); });
    m_last_round = collect();
    for (size_t i = 0; i < m_conns.size(); ++i)
        if (integer_reply(m_conns[i]) == -1)
            m_last_round[i].detail = "slot already run";
    const Tally t = count();
    if (t.won())
        return SlotClaim::claimed;
    return t.no > 0 ? SlotClaim::done : SlotClaim::failed;
}

void Lock::finish_slot(std::string_view run, int exit_status, Millis length,
                       std::string_view start_error) {
    const std::array<std::string, 1> keys{m_name.record};
    std::vector<std::string> args{std::string(run), std::to_string(exit_status),
                                  std::to_string(m_record_age.count()),
                                  std::to_string(length.count())};
    if (!start_error.empty())
        args.emplace_back(start_error);
    send_all(script_call(k_finish_slot_script, true, keys, args),
             script_call(k_finish_slot_script, false, keys, args), Clock::now());
    (void)redis::wait(m_conns, [&] {
        return static_cast<size_t>(std::ranges::count_if(m_conns, [](const redis::Connection& c) {
                   return integer_reply(c).has_value();
               })) >= majority_of(m_conns.size());
    });
    m_last_round = collect();
}

} // namespace redlock::lock
