#include "job/run.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "job/supervise.hpp"
#include "lock/holder.hpp"
#include "lock/inspect.hpp"
#include "lock/lock.hpp"
#include "process/cgroup.hpp"
#include "process/child.hpp"
#include "process/identity.hpp"
#include "process/signals.hpp"
#include "process/watchdog.hpp"
#include "redis/fanout.hpp"
#include "util/duration.hpp"
#include "util/format.hpp"
#include "util/log.hpp"
#include "util/random.hpp"
#include "util/redact.hpp"
#include "util/timestamp.hpp"

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

// A run started inside a run of the same NAME (flock's FLOCKER idiom): its environment names
// the lock (REDLOCK_KEY) and the outer run's token (REDLOCK_TOKEN). If that token holds the
// lock on a majority of these servers, PROGRAM replaces redlock at once, under the outer
// lock: the outer run renews it, stops PROGRAM with its own on a lost lease (PROGRAM is in
// its tree) and releases it; taking it again would wait on ourselves forever. Nothing in
// the environment is trusted unchecked: a token that is stale, forged, from other servers,
// or copied into a process outside the holder's tree makes this an ordinary run. Returns
// how it failed when nested (exec failed), nullopt when not.
std::optional<RunResult> run_nested(const RunSpec& options, const config::Config& config,
                                    Observer& observer) {
    const char* key = std::getenv("REDLOCK_KEY");
    const char* token = std::getenv("REDLOCK_TOKEN");
    if (!key || !token || !*token || options.name != key)
        return std::nullopt;
    auto conns = redis::connect_all(config.servers);
    auto view = lock::inspect(conns, config.key_prefix, options.name, true);
    // The lock itself, or one permit of a semaphore (--limit).
    auto ours = [&](const lock::LockView& v) {
        return v.state == lock::LockState::held && v.token == token;
    };
    const lock::LockView* held = ours(view) ? &view : nullptr;
    for (const auto& permit : view.permits)
        if (ours(permit))
            held = &permit;
    if (!held) {
        log::verbose("'{}': the REDLOCK_TOKEN inherited does not hold it on these servers "
                     "({}); acquiring it",
                     options.name, lock::state_name(view.state));
        return std::nullopt;
    }
    // The token is no secret from whoever can read the servers (it is the key's value),
    // and `status` used to print it: holding the lock proves nothing about this process.
    // It must also descend from the process the holder's metadata names (for `run`, the
    // holding redlock; for `acquire`, the script that ran it), that same process and not
    // one that took its pid later. Else this is an ordinary run, which waits its turn.
    const lock::Holder* holder = held->holder ? &*held->holder : nullptr;
    for (const auto& s : held->servers)
        if (!holder && s.token == token && s.holder)
            holder = &*s.holder;
    auto running_at = [](const lock::Holder& h) {
        long long boottime = -1;
        const auto& text = h.process;
        if (std::from_chars(text.data(), text.data() + text.size(), boottime).ptr !=
            text.data() + text.size())
            return false;
        auto wall = util::parse_utc_timestamp(h.acquired_at);
        char host[256] = {};
        return wall && ::gethostname(host, sizeof host - 1) == 0 && h.host == host &&
               process::is_ancestor_running_at(static_cast<pid_t>(h.pid), boottime,
                                               wall->time_since_epoch().count());
    };
    if (!holder || holder->process.empty() || !running_at(*holder)) {
        observer.notice(util::format(
            "'{}': REDLOCK_TOKEN holds it, but this process does not descend from its holder "
            "({}); taking it as an ordinary run",
            options.name,
            holder ? util::format("pid {} on {}", holder->pid, holder->host)
                   : std::string("its metadata is missing")));
        return std::nullopt;
    }
    if (options.max_hold || options.min_hold || options.once_per)
        observer.notice(util::format("'{}' is held by the run this one is nested in; --max-hold, "
                                     "--min-hold and --once-per apply to that run, not here",
                                     options.name));
    // The fence is the outer run's. The inherited REDLOCK_FENCE is taken when a server
    // that answered records it for this token (one always does: the servers that have the
    // fence are a majority); else, the environment edited, the one a majority records.
    std::optional<long long> fence;
    if (const char* inherited = std::getenv("REDLOCK_FENCE")) {
        long long value = 0;
        const std::string_view text(inherited);
        if (std::from_chars(text.data(), text.data() + text.size(), value).ptr ==
            text.data() + text.size())
            for (const auto& s : held->servers)
                if (s.token == token && s.holder_fence == value)
                    fence = value;
    }
    if (!fence)
        fence = held->fence;
    if (!fence)
        return failed({util::ErrorKind::unavailable,
                       "cannot tell the fence of the run this one is nested in: too few servers "
                       "answered to agree on it, and REDLOCK_FENCE is not one they record; "
                       "PROGRAM not started"});
    ::setenv("REDLOCK_FENCE", std::to_string(*fence).c_str(), 1);
    log::verbose("'{}' is held by the run this one is nested in (fence {}); running PROGRAM "
                 "under it",
                 options.name, *fence);
    return failed(process::exec_in_place(options.program));
}

// What a run records in its name's history (lock/history.hpp): who it is, and how it
// ended. Nothing when the config turns history off (history = 0). The run's id is the
// first half of its first token: unique, and no secret once the run has ended.
class Recorder {
  public:
    Recorder(const config::Config& config, const lock::Holder& holder, const std::string& token)
        : m_on(config.history > 0), m_config(config), m_holder(holder), m_run(token.substr(0, 16)),
          m_started(Clock::now()) {}

    // For the last attempt of a run that will not wait on (job::acquire fills in the
    // outcome and the time waited); null for a run that waits as long as it takes.
    [[nodiscard]] const lock::HistoryRecord* skip(bool can_give_up) {
        if (!m_on || !can_give_up)
            return nullptr;
        m_skip = base();
        return &*m_skip;
    }
    void acquired(Clock::time_point at) { m_acquired = at; }

    // The entry of a run that got the lock (or, before that, was stopped), as it ends.
    [[nodiscard]] std::optional<lock::HistoryRecord>
    ended(Outcome outcome, std::optional<int> status, long long fence,
          const std::optional<lock::Holder>& by = std::nullopt) const {
        if (!m_on)
            return std::nullopt;
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
        return record;
    }

    bool m_on;
    const config::Config& m_config;
    const lock::Holder& m_holder;
    std::string m_run;
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
    const auto token = util::random_token();
    auto lock =
        make_lock(config, options.name, token, options.ttl, lock::holder_fields(holder, token));
    if (options.limit > 1)
        lock.set_limit(options.limit);
    Recorder recorder(config, holder, token);
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
                 {"REDLOCK_FENCE", std::to_string(lock.fence())}};
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
    watchdog->watch_group(child->pid(), child->own_session());

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
