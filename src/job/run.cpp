#include "job/run.hpp"

#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "job/nested.hpp"
#include "job/recorder.hpp"
#include "job/supervise.hpp"
#include "job/will.hpp"
#include "lock/cron_slot.hpp"
#include "lock/holder.hpp"
#include "lock/inspect.hpp"
#include "lock/lock.hpp"
#include "process/cgroup.hpp"
#include "process/child.hpp"
#include "process/signals.hpp"
#include "process/watchdog.hpp"
#include "redis/fanout.hpp"
#include "util/duration.hpp"
#include "util/format.hpp"
#include "util/log.hpp"
#include "util/random.hpp"
#include "util/redact.hpp"

namespace redlock::job {

const char* outcome_name(Outcome outcome) {
    switch (outcome) {
    case Outcome::ran:
        return "ran";
    case Outcome::lost:
        return "lost";
    case Outcome::force_released:
        return "force-released";
    case Outcome::max_hold:
        return "max-hold";
    case Outcome::skipped_held:
        return "skipped-held";
    case Outcome::skipped_slot:
        return "skipped-slot";
    case Outcome::gave_up:
        return "gave-up";
    case Outcome::interrupted:
        return "interrupted";
    case Outcome::stopped:
        return "stopped";
    case Outcome::failed:
        return "failed";
    case Outcome::killed:
        return "killed";
    case Outcome::skipped_overlap:
        return "skipped-overlap";
    case Outcome::missed:
        return "missed";
    }
    return "failed";
}

namespace {

using namespace std::chrono_literals;
namespace log = util::log;

RunResult failed(util::Error error) {
    return RunResult{.outcome = Outcome::failed, .error = std::move(error)};
}

// The status a --once-per record keeps: PROGRAM's, or what stopped it.
int slot_status(const RunResult& result) {
    switch (result.outcome) {
    case Outcome::lost:
    case Outcome::force_released:
        return util::exit_code::lease_lost;
    case Outcome::max_hold:
        return util::exit_code::max_hold;
    case Outcome::stopped:
        return util::exit_code::internal;
    default:
        return result.program_status;
    }
}

// The release, with the run's history entry in the same write; -v says where the entry
// could not be written (it changes nothing of the run). `watchdog` is disarmed as soon as
// the release returns, before anything is said of it: a kill from then on must not have
// the releaser release, and record the run, a second time.
void release(lock::Lock& lock, const std::optional<lock::HistoryRecord>& record, Observer& observer,
             process::Watchdog* watchdog = nullptr) {
    auto results =
        lock.release(lock::Lock::ReleaseWait::every_answer, {}, record ? &*record : nullptr);
    if (watchdog)
        watchdog->disarm();
    observer.released(results);
    for (const auto& failure : lock.history_failures())
        log::verbose("history not written on {}", failure);
}

// --once-per: a run needs its slot as well as the lock (lock/scripts.hpp,
// k_claim_slot_script). A slot already run, or being run (its run claimed it), ends this
// run as a lock held elsewhere does: released, status 75 or -E. nullopt: claimed.
std::optional<RunResult> claim_slot(lock::Lock& lock, const RunSpec& options,
                                    const lock::Holder& holder, const config::Config& config,
                                    const Recorder& recorder, Observer& observer) {
    const Millis length = *options.once_per;
    // Cron on a host whose clock is a little ahead of the servers' starts a run just before
    // the slot begins; it counts for that slot, not for the previous one (already run).
    const Millis early = std::min<Millis>(length / 10, 10s);
    const std::vector<std::string> fields{
        "host", holder.host, "pid",     std::to_string(holder.pid),
        "user", holder.user, "command", holder.command};
    const auto claim = lock.claim_slot(length, early, recorder.run(), fields);
    if (claim == lock::Lock::SlotClaim::claimed) {
        log::verbose("'{}': claimed this {} slot: {}", options.name, util::format_duration(length),
                     lock::describe_round(lock.last_round()));
        return std::nullopt;
    }
    const auto round = lock.last_round();
    if (claim == lock::Lock::SlotClaim::failed) {
        release(lock, recorder.ended(Outcome::failed, util::exit_code::unavailable, lock.fence()),
                observer);
        return failed(
            {quorum_error(round).kind,
             util::format("cannot claim this {} slot of '{}': {}", util::format_duration(length),
                          options.name, quorum_error(round).message)});
    }
    // Who ran this slot, read before the release so that the history's entry names it.
    auto view = lock::inspect(lock.connections(), config.key_prefix, options.name, true);
    std::optional<lock::Holder> by;
    if (view.last_run)
        by = view.last_run->who;
    release(lock, recorder.ended(Outcome::skipped_slot, std::nullopt, 0, by), observer);
    observer.slot_taken(options.name, length, view.last_run);
    return RunResult{.outcome = Outcome::skipped_slot};
}

// --once-per, when PROGRAM could not be started after the slot was claimed (a typo in one
// host's crontab): a run that never began must not use up the slot, or the hosts that can
// run the job would skip it. The record says why, for status, and the slot is open again.
void give_back_slot(lock::Lock& lock, const RunSpec& options, const config::Config& config,
                    const Recorder& recorder, const util::Error& why) {
    if (options.once_per)
        lock.finish_slot(recorder.run(), util::exit_status(why.kind), *options.once_per,
                         util::redact_secrets(why.message, known_secrets(config)));
    if (options.cron)
        lock::finish_cron_slot(lock, options.cron->instant_ms, slot_state(Outcome::failed),
                               util::redact_secrets(why.message, known_secrets(config)));
}

// The end of what a cron run's slot record needs (CronSlot::keep), ms since the epoch.
std::optional<long long> slot_keep_until(const RunSpec& options) {
    if (!options.cron)
        return std::nullopt;
    return options.cron->instant_ms + options.cron->keep.count();
}

// A cron slot taken, and the slots before it that it found missed; or how the run ended
// without it, the entries it had to record written (missed, skipped-overlap).
struct SlotStart {
    std::optional<RunResult> result;
    std::vector<long long> missed;
};

SlotStart take_slot_for(lock::Lock& lock, const RunSpec& options, const lock::Holder& holder,
                        const Recorder& recorder, process::SignalEvents& signals) {
    auto taken = take_slot(lock, options.name, *options.cron, holder.host, signals);
    auto record = [&](std::span<const long long> slots, Outcome outcome) {
        std::vector<lock::HistoryRecord> entries;
        for (long long slot : slots)
            entries.push_back(recorder.slot_entry(options.name, slot, outcome));
        lock::record_slot_entries(lock, entries);
    };
    using How = SlotTaken::How;
    switch (taken.how) {
    case How::claimed:
        return {std::nullopt, std::move(taken.missed_ms)};
    case How::decided:
        return {RunResult{.outcome = Outcome::skipped_slot, .slot_by = taken.by_host}, {}};
    case How::skipped_overlap: {
        const long long slot = options.cron->instant_ms;
        record({&slot, 1}, Outcome::skipped_overlap);
        return {RunResult{.outcome = Outcome::skipped_overlap}, {}};
    }
    case How::missed:
        record(taken.missed_ms, Outcome::missed);
        return {RunResult{.outcome = Outcome::missed, .slots_missed = taken.missed_ms.size()}, {}};
    case How::interrupted:
        return {RunResult{.outcome = Outcome::interrupted, .signal = taken.signal}, {}};
    case How::failed:
        break;
    }
    return {failed(taken.error.value_or(util::Error{util::ErrorKind::internal, "no slot"})), {}};
}

} // namespace

namespace {

// PROGRAM's own cgroup where one can be made: nothing PROGRAM starts can leave it.
std::optional<process::Cgroup> make_cgroup() {
    if (const char* off = std::getenv("REDLOCK_NO_CGROUP"); off && *off)
        return std::nullopt;
    std::string why_not;
    auto cgroup = process::Cgroup::create(::getpid(), why_not);
    if (!cgroup)
        log::verbose("PROGRAM gets no cgroup of its own: {}", why_not);
    return cgroup;
}

// The will of this run, as it starts (job/will.hpp).
WillBody will_body(const RunSpec& options, const config::Config& config, const lock::Holder& holder,
                   const lock::Lock& lock, const std::string& run) {
    WillBody body;
    body.config.key_prefix = config.key_prefix;
    body.config.history = config.history;
    body.config.history_max_age = config.history_max_age;
    body.config.servers = config.servers;
    body.name = options.name;
    body.ttl = options.ttl;
    body.limit = lock.limit();
    body.waiter = lock.waiter();
    body.once_per = options.once_per;
    if (options.cron)
        body.cron_slot_ms = options.cron->instant_ms;
    body.cron_keep_until_ms = slot_keep_until(options);
    body.min_hold = options.min_hold;
    body.run = run;
    body.host = holder.host;
    body.pid = holder.pid;
    body.user = holder.user;
    body.command = holder.command;
    body.started = Clock::now();
    body.started_wall = std::chrono::system_clock::now();
    body.metrics_file = options.metrics_file;
    body.events_file = options.events_file;
    return body;
}

} // namespace

RunResult run(const RunSpec& options, const config::Config& config, Observer& observer) {
    if (auto nested = run_nested(options, config, observer))
        return *nested;
    auto signals = process::SignalEvents::open();
    if (!signals)
        return failed(signals.error());

    auto holder = lock::current_holder(options.program, ::getpid(), known_secrets(config));
    holder.ttl_ms = options.ttl.count();
    // What a run nested in PROGRAM proves it descends from this one with (job/nested.hpp).
    const auto nest_secret = util::random_token();
    holder.nest = lock::nest_digest(nest_secret);
    const auto token = util::random_token();
    auto fields = lock::holder_fields(holder, token);
    if (options.cron) // what a holder runs for, for the runs of the same job that find it
        fields.insert(fields.end(), {"cron_slot", std::to_string(options.cron->instant_ms)});
    auto lock = make_lock(config, options.name, token, options.ttl, std::move(fields));
    if (options.limit > 1)
        lock.set_limit(options.limit);
    lock.keep_record(config.history_max_age,
                     record_slot(options.once_per, slot_keep_until(options)));
    const auto recorder_started = Clock::now();
    Recorder recorder(config, holder, Recorder::run_id(token), recorder_started, options.once_per);
    if (options.cron)
        recorder.set_slot(options.cron->instant_ms, slot_keep_until(options));

    // The watchdog first, before the first attempt: from then on, whenever redlock dies,
    // it kills PROGRAM's tree (in its cgroup where one can be made) and then frees what
    // the run held or was acquiring, as the will says (job/will.hpp).
    std::optional<process::Cgroup> cgroup = make_cgroup();
    auto will =
        Will::create(will_body(options, config, holder, lock, Recorder::run_id(token)), lock);
    if (will)
        lock.before_attempt([&will](const lock::Lock& l) { will->attempt(l); });
    auto watchdog = process::Watchdog::start(cgroup ? &*cgroup : nullptr, will ? will->fd() : -1);
    if (!watchdog)
        return failed({watchdog.error().kind,
                       util::format("cannot start the watchdog: {}; PROGRAM not started",
                                    watchdog.error().message)});
    std::vector<long long> missed; // cron: slots to record missed with the run's end
    if (options.cron) {
        auto taken = take_slot_for(lock, options, holder, recorder, *signals);
        if (taken.result) {
            watchdog->disarm(); // nothing is left on the servers
            return *taken.result;
        }
        missed = std::move(taken.missed);
        observer.acquired(Acquired{options.name, lock.fence(), lock.permit(), lock.limit(), 1,
                                   Clock::now() - recorder_started, 0, lock.last_round()});
    } else {
        auto policy = options.wait;
        policy.history_keep = config.history;
        policy.history_max_age = config.history_max_age;
        auto acquired = acquire(lock, options.name, policy, *signals, observer,
                                recorder.skip(options.wait.wait.has_value()));
        if (!acquired || acquired->outcome != Acquisition::Outcome::acquired)
            watchdog->disarm(); // nothing is left on the servers
        if (!acquired)
            return failed(acquired.error());
        switch (acquired->outcome) {
        case Acquisition::Outcome::acquired:
            break;
        case Acquisition::Outcome::held:
            return RunResult{.outcome = Outcome::skipped_held};
        case Acquisition::Outcome::gave_up:
            return RunResult{.outcome = Outcome::gave_up};
        case Acquisition::Outcome::interrupted:
            return RunResult{.outcome = Outcome::interrupted, .signal = acquired->signal};
        }
    }
    const auto acquired_at = Clock::now();
    recorder.acquired(acquired_at);
    if (will)
        will->acquired(lock, acquired_at);
    // Released from now on (or kept for --min-hold): the watchdog stays armed until then.
    auto let_go = [&](const std::optional<lock::HistoryRecord>& record) {
        release(lock, record, observer, &*watchdog);
    };
    if (options.once_per)
        if (auto claim = claim_slot(lock, options, holder, config, recorder, observer)) {
            watchdog->disarm();
            return *claim;
        }

    // A renewal must be answered well inside the lease; past a quarter of the TTL one slow
    // round trip more loses it. Said once, at the start, not when it is too late.
    if (lock.round_trip() > options.ttl / 4)
        observer.notice(util::format(
            "acquiring '{}' took {} of its {} ttl; renewals may not keep up, use a ttl of at "
            "least {}",
            options.name, util::format_duration(std::chrono::ceil<Millis>(lock.round_trip())),
            util::format_duration(options.ttl),
            util::format_duration(std::chrono::ceil<Millis>(lock.round_trip()) * 10)));
    process::become_subreaper();
    // The lease's deadlines: from PROGRAM's first instant on, a stopped redlock cannot leave
    // it running past the lease.
    StopSchedule schedule(options.ttl);
    watchdog->update(schedule.term_at(lock.validity_end()), schedule.kill_at(lock.validity_end()));
    process::SpawnOptions spawn;
    spawn.argv = options.program;
    spawn.env = {{"REDLOCK_KEY", options.name},
                 {"REDLOCK_TOKEN", lock.token()},
                 {"REDLOCK_FENCE", std::to_string(lock.fence())},
                 {k_nest_secret_variable, nest_secret}};
    if (lock.limit() > 1) // which permit: its fences grow on their own
        spawn.env.emplace_back("REDLOCK_PERMIT", std::to_string(lock.permit()));
    spawn.child_mask = &signals->original_mask();
    spawn.cgroup = cgroup ? &*cgroup : nullptr;
    watchdog->spawning();
    auto child = process::Child::spawn(spawn);
    if (!child) {
        watchdog->reaped(); // the child that could not exec is reaped
        give_back_slot(lock, options, config, recorder, child.error());
        let_go(
            recorder.ended(Outcome::failed, util::exit_status(child.error().kind), lock.fence()));
        return failed(child.error());
    }
    if (cgroup && !child->in_cgroup()) {
        log::verbose("PROGRAM could not join {}: {}", cgroup->path(),
                     std::strerror(child->cgroup_error()));
        cgroup.reset();
    } else if (cgroup) {
        log::verbose("PROGRAM runs in the cgroup {}", cgroup->path());
    }
    child->ignore_descendant(watchdog->pid());
    watchdog->watch_group(child->pid(), child->own_session(), child->in_cgroup());

    const auto supervised =
        supervise(lock, *child, *signals, *watchdog, options.name, options.max_hold, observer);
    // The tree is reaped: its cgroup goes now, not after the release's round trip, so a
    // redlock killed meanwhile leaves none behind. The watchdog stays armed for the
    // release: a redlock killed during it leaves the release to its releaser.
    if (cgroup)
        cgroup->remove();
    watchdog->reaped();
    RunResult result{.outcome = Outcome::ran,
                     .program_status = process::exit_status_of(supervised.wait_status)};
    switch (supervised.end) {
    case Supervised::End::exited:
        break;
    case Supervised::End::lost:
        result.outcome = supervised.forced_by ? Outcome::force_released : Outcome::lost;
        break;
    case Supervised::End::max_hold:
        result.outcome = Outcome::max_hold;
        break;
    case Supervised::End::stopped:
        result.outcome = Outcome::stopped;
        break;
    }
    // A cron slot's PROGRAM that failed once its daemon passed a signal on (a drain) was
    // interrupted: an at-least-once slot is run again elsewhere.
    if (options.cron && supervised.end == Supervised::End::exited && supervised.forwarded != 0 &&
        result.program_status != 0) {
        result.outcome = Outcome::interrupted;
        result.signal = supervised.forwarded;
    }
    // The run's end, as its entry says it however late a server gets it.
    const auto ended_at = Clock::now();
    recorder.finished(ended_at);
    if (will)
        will->ended(result.outcome, slot_status(result), ended_at);
    if (options.once_per) // the slot's record says how the run ended; kept a slot at least
        lock.finish_slot(recorder.run(), slot_status(result), *options.once_per);
    if (options.cron) { // and so does a cron slot's, with the slots it found missed
        std::vector<lock::HistoryRecord> entries;
        for (long long slot : missed)
            entries.push_back(recorder.slot_entry(options.name, slot, Outcome::missed));
        lock::finish_cron_slot(lock, options.cron->instant_ms, slot_state(result.outcome),
                               std::to_string(slot_status(result)), entries);
        result.slots_missed = missed.size();
    }
    // --min-hold: held at least D from acquiring. What is left of D becomes the lease
    // (compare-and-pexpire, as a renewal) instead of a release; it then simply expires.
    // Not after a lost lease (the lock is not ours), nor for the last few milliseconds.
    const auto record =
        recorder.ended(result.outcome, slot_status(result), lock.fence(), supervised.forced_by);
    if (options.min_hold && result.outcome != Outcome::lost &&
        result.outcome != Outcome::force_released) {
        auto left = std::chrono::ceil<Millis>(acquired_at + *options.min_hold - Clock::now());
        if (left >= 10ms) {
            if (lock.extend(left, record ? &*record : nullptr) == lock::RenewStatus::renewed) {
                watchdog->disarm();
                for (const auto& failure : lock.history_failures())
                    log::verbose("history not written on {}", failure);
                observer.kept(left, *options.min_hold);
                return result;
            }
            log::verbose("'{}': could not keep it for the rest of --min-hold; releasing it: {}",
                         options.name, lock::describe_round(lock.last_round()));
        }
    }
    let_go(record);
    return result;
}

} // namespace redlock::job
