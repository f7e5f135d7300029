#include "job/run.hpp"

#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "job/nested.hpp"
#include "job/supervise.hpp"
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

// What a run records in its name's history (lock/history.hpp): who it is, and how it
// ended. With history = 0 no entry is kept, but the name's counters still count it (the
// script writes them with the entry: lock/scripts.hpp, k_history_counters). The run's id
// is the first half of its first token: unique, and no secret once the run has ended.
class Recorder {
  public:
    Recorder(const config::Config& config, const lock::Holder& holder, const std::string& token,
             std::optional<Millis> once_per)
        : m_config(config), m_holder(holder), m_run(token.substr(0, 16)), m_once_per(once_per),
          m_started(Clock::now()) {}

    // For the last attempt of a run that will not wait on (job::acquire fills in the
    // outcome and the time waited); null for a run that waits as long as it takes.
    [[nodiscard]] const lock::HistoryRecord* skip(bool can_give_up) {
        if (!can_give_up)
            return nullptr;
        m_skip = base();
        return &*m_skip;
    }
    void acquired(Clock::time_point at) { m_acquired = at; }

    // The entry of a run that got the lock (or, before that, was stopped), as it ends.
    [[nodiscard]] std::optional<lock::HistoryRecord>
    ended(Outcome outcome, std::optional<int> status, long long fence,
          const std::optional<lock::Holder>& by = std::nullopt) const {
        auto record = base();
        const auto now = Clock::now();
        const auto acquired = m_acquired.value_or(now);
        record.waited = std::chrono::floor<Millis>(acquired - m_started);
        record.held = std::chrono::floor<Millis>(now - acquired);
        record.add("outcome", outcome_name(outcome));
        if (status)
            record.add("status", std::to_string(*status));
        if (fence > 0)
            record.add("fence", std::to_string(fence));
        if (by) {
            record.add("by_host", by->host);
            record.add("by_pid", std::to_string(by->pid));
            record.add("by_user", by->user);
        }
        return record;
    }

  private:
    [[nodiscard]] lock::HistoryRecord base() const {
        lock::HistoryRecord record;
        record.keep = m_config.history;
        record.max_age = m_config.history_max_age;
        record.fields.reserve(160 + m_holder.command.size());
        record.add("run", m_run);
        record.add("host", m_holder.host);
        record.add("pid", std::to_string(m_holder.pid));
        record.add("user", m_holder.user);
        record.add("command", m_holder.command);
        if (m_once_per) // the counters keep the slot, for the overdue alert
            record.add("slot_ms", std::to_string(m_once_per->count()));
        return record;
    }

    const config::Config& m_config;
    const lock::Holder& m_holder;
    std::string m_run;
    std::optional<Millis> m_once_per;
    Clock::time_point m_started;
    std::optional<Clock::time_point> m_acquired;
    std::optional<lock::HistoryRecord> m_skip;
};

// The release, with the run's history entry in the same write; -v says where the entry
// could not be written (it changes nothing of the run).
void release(lock::Lock& lock, const std::optional<lock::HistoryRecord>& record,
             Observer& observer) {
    observer.released(
        lock.release(lock::Lock::ReleaseWait::every_answer, {}, record ? &*record : nullptr));
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
    const auto claim = lock.claim_slot(length, early, fields);
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
                    const util::Error& why) {
    if (options.once_per)
        lock.finish_slot(util::exit_status(why.kind), *options.once_per,
                         util::redact_secrets(why.message, known_secrets(config)));
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
    auto lock =
        make_lock(config, options.name, token, options.ttl, lock::holder_fields(holder, token));
    if (options.limit > 1)
        lock.set_limit(options.limit);
    Recorder recorder(config, holder, token, options.once_per);
    auto acquired = acquire(lock, options.name, options.wait, *signals, observer,
                            recorder.skip(options.wait.wait.has_value()));
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
    const auto acquired_at = Clock::now();
    recorder.acquired(acquired_at);
    if (options.once_per)
        if (auto claim = claim_slot(lock, options, holder, config, recorder, observer))
            return *claim;

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
    // PROGRAM's own cgroup where one can be made: nothing PROGRAM starts can leave it.
    std::optional<process::Cgroup> cgroup;
    if (const char* off = std::getenv("REDLOCK_NO_CGROUP"); !off || !*off) {
        std::string why_not;
        cgroup = process::Cgroup::create(::getpid(), why_not);
        if (!cgroup)
            log::verbose("PROGRAM gets no cgroup of its own: {}", why_not);
    }
    // The watchdog first, with the lease's deadlines: from PROGRAM's first instant on, a
    // stopped redlock cannot leave it running past the lease.
    StopSchedule schedule(options.ttl);
    auto watchdog = process::Watchdog::start(schedule.term_at(lock.validity_end()),
                                             schedule.kill_at(lock.validity_end()),
                                             cgroup ? &*cgroup : nullptr);
    if (!watchdog) {
        give_back_slot(
            lock, options, config,
            {watchdog.error().kind, "cannot start the watchdog: " + watchdog.error().message});
        release(
            lock,
            recorder.ended(Outcome::failed, util::exit_status(watchdog.error().kind), lock.fence()),
            observer);
        return failed({watchdog.error().kind,
                       util::format("cannot start the watchdog: {}; PROGRAM not started",
                                    watchdog.error().message)});
    }
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
    auto child = process::Child::spawn(spawn);
    if (!child) {
        watchdog->disarm();
        give_back_slot(lock, options, config, child.error());
        release(
            lock,
            recorder.ended(Outcome::failed, util::exit_status(child.error().kind), lock.fence()),
            observer);
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
    // redlock killed meanwhile leaves none behind. Until then the watchdog, which removes
    // it if redlock dies, stays armed.
    if (cgroup)
        cgroup->remove();
    watchdog->disarm();
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
    if (options.once_per) // the slot's record says how the run ended; kept a slot at least
        lock.finish_slot(slot_status(result), *options.once_per);
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
                for (const auto& failure : lock.history_failures())
                    log::verbose("history not written on {}", failure);
                observer.kept(left, *options.min_hold);
                return result;
            }
            log::verbose("'{}': could not keep it for the rest of --min-hold; releasing it: {}",
                         options.name, lock::describe_round(lock.last_round()));
        }
    }
    release(lock, record, observer);
    return result;
}

} // namespace redlock::job
