#include "job/dead_run.hpp"

#include <csignal>

#include "job/acquire.hpp"
#include "job/cron_slot.hpp"
#include "job/recorder.hpp"
#include "lock/cron_slot.hpp"
#include "lock/history.hpp"
#include "redis/fanout.hpp"
#include "util/error.hpp"
#include "util/format.hpp"
#include "util/log.hpp"

namespace redlock::job {

namespace {

using namespace std::chrono_literals;

// The status a killed run shows where one is needed (the --once-per record): as its
// parent saw it for a SIGKILL, whatever the signal was (the releaser cannot tell).
constexpr int k_killed_status = 128 + SIGKILL;

void note_history_failures(const lock::Lock& lock) {
    for (const auto& failure : lock.history_failures())
        util::log::verbose("history not written on {}", failure);
}

} // namespace

DeadRun release_dead_run(const WillContents& will, Observer& observer) {
    const auto& body = will.body;
    const auto& state = will.state;
    auto lock = make_lock(body.config, body.name, state.token, body.ttl);
    // As the run kept it: a cron slot's record outlives the history's age when it must.
    lock.keep_record(body.config.history_max_age,
                     record_slot(body.once_per, body.cron_keep_until_ms));
    if (body.limit > 1) {
        lock.set_limit(body.limit);
        if (state.permit > 0)
            lock.use_permit(state.permit);
    }
    lock.take_place_of(body.waiter, state.ticket, state.listed);

    DeadRun out;
    const bool ended = state.phase == Phase::ended && state.outcome;
    out.result.outcome = ended ? *state.outcome : Outcome::killed;
    out.result.program_status = ended ? state.status.value_or(0) : k_killed_status;
    lock::Holder holder;
    holder.host = body.host;
    holder.pid = body.pid;
    holder.user = body.user;
    holder.command = body.command;
    Recorder recorder(body.config, holder, body.run, body.started, body.once_per);
    if (body.cron_slot_ms)
        recorder.set_slot(*body.cron_slot_ms, body.cron_keep_until_ms);
    if (state.acquired)
        recorder.acquired(*state.acquired);
    if (state.ended) // as the run's own entry says it
        recorder.finished(*state.ended);

    if (!will.tree || !will.tree->proven) {
        out.note =
            util::format("'{}': the lock keeps its ttl: the tree of the killed run's PROGRAM "
                         "was not proven gone ({})",
                         body.name, will.tree ? will.tree->why : "no verdict");
        observer.notice(*out.note);
        if (state.phase != Phase::acquiring) {
            // The entry alone, with the note: nothing is released.
            if (auto record = recorder.ended(Outcome::killed, std::nullopt, state.fence,
                                             std::nullopt, *out.note))
                if (auto entry = lock::history_command(lock.name_keys(), state.token, *record);
                    !entry.empty())
                    redis::request_all(lock.connections(), entry, {});
        }
        return out;
    }
    if (state.phase == Phase::acquiring) {
        observer.released(lock.release());
        lock.leave_queue();
        return out;
    }
    const std::optional<int> status = ended ? state.status : std::nullopt;
    const auto record = recorder.ended(out.result.outcome, status, state.fence);
    if (body.once_per)
        lock.finish_slot(body.run, status.value_or(k_killed_status), *body.once_per);
    if (body.cron_slot_ms) // killed: an at-least-once slot is run again elsewhere
        lock::finish_cron_slot(lock, *body.cron_slot_ms, slot_state(out.result.outcome),
                               std::to_string(status.value_or(k_killed_status)));
    // --min-hold: held at least that long from acquiring, as the run itself would.
    const bool ours =
        out.result.outcome != Outcome::lost && out.result.outcome != Outcome::force_released;
    if (body.min_hold && state.acquired && ours) {
        const auto left =
            std::chrono::ceil<Millis>(*state.acquired + *body.min_hold - Clock::now());
        if (left >= 10ms &&
            lock.extend(left, record ? &*record : nullptr) == lock::RenewStatus::renewed) {
            note_history_failures(lock);
            observer.kept(left, *body.min_hold);
            return out;
        }
    }
    observer.released(
        lock.release(lock::Lock::ReleaseWait::every_answer, {}, record ? &*record : nullptr));
    note_history_failures(lock);
    return out;
}

} // namespace redlock::job
