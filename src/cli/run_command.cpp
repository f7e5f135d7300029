#include "cli/run_command.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/common.hpp"
#include "lock/holder.hpp"
#include "lock/inspect.hpp"
#include "lock/lock.hpp"
#include "lock/name.hpp"
#include "process/cgroup.hpp"
#include "process/child.hpp"
#include "process/identity.hpp"
#include "process/signals.hpp"
#include "process/watchdog.hpp"
#include "redis/fanout.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"
#include "util/format.hpp"
#include "util/log.hpp"
#include "util/random.hpp"
#include "util/redact.hpp"
#include "util/timestamp.hpp"

namespace redlock::cli {

namespace {

using Clock = lock::Clock;
using Millis = std::chrono::milliseconds;
using namespace std::chrono_literals;
namespace log = util::log;

// When PROGRAM is stopped on a lost lease, relative to the end of the lease's validity:
// TERM `grace` before it, KILL `kill_margin` before it, so PROGRAM is gone by the time the
// lease can expire on the servers. The watchdog keeps the same schedule.
struct StopSchedule {
    explicit StopSchedule(Millis ttl)
        : grace(std::max<Millis>(ttl / 3, 1ms)),
          kill_margin(std::clamp<Millis>(ttl / 10, 1ms, 1000ms)) {}
    [[nodiscard]] Clock::time_point term_at(Clock::time_point validity_end) const {
        return validity_end - grace;
    }
    [[nodiscard]] Clock::time_point kill_at(Clock::time_point validity_end) const {
        return validity_end - kill_margin;
    }

    Millis grace;       // between SIGTERM and the latest SIGKILL
    Millis kill_margin; // how long before the lease can expire PROGRAM must be gone
};

// Supervises PROGRAM while keeping the lease; returns the exit status.
class Supervisor {
  public:
    Supervisor(lock::Lock& lock, process::Child& child, process::SignalEvents& signals,
               process::Watchdog& watchdog, std::string name, std::optional<Millis> max_hold)
        : m_lock(lock), m_child(child), m_signals(signals), m_watchdog(watchdog),
          m_name(std::move(name)), m_schedule(lock.ttl()), m_max_hold(max_hold) {
        if (max_hold)
            m_max_hold_at = Clock::now() + *max_hold;
        auto ttl = lock.ttl();
        m_renew_interval = std::max<Millis>(ttl / 3, 1ms);
        m_retry_interval = std::clamp<Millis>(ttl / 10, 10ms, 1000ms);
        schedule_renewal(Clock::now());
    }

    int run() {
        std::vector<pollfd> fds;
        for (;;) {
            auto now = Clock::now();
            // First, before PROGRAM's end is taken as it is: redlock may have been stopped
            // or starved past the lease, and PROGRAM killed by the watchdog meanwhile.
            if (!m_lost && now >= term_at())
                lose(now, ran_out_why(), false);
            if (m_program_status && !m_children_remain)
                break;
            act_on_deadlines(now);

            fds.clear();
            fds.push_back(pollfd{m_signals.fd(), POLLIN, 0});
            // No events asked: poll() says POLLERR once the watchdog, the pipe's reader, is gone.
            fds.push_back(pollfd{m_watchdog_dead ? -1 : m_watchdog.pipe_fd(), 0, 0});
            redis::add_pollfds(m_lock.connections(), fds);
            now = Clock::now(); // act_on_deadlines may have taken a while (/proc scans)
            int rc = ::poll(fds.data(), fds.size(), util::poll_timeout_ms(now, next_wakeup(now)));
            if (rc < 0 && errno != EINTR)
                return give_up(util::format("poll: {}", std::strerror(errno)));
            now = Clock::now();
            if (m_lock.renewal_in_flight()) {
                redis::dispatch(m_lock.connections(), std::span<const pollfd>(fds).subspan(2), now);
                check_renewal(now);
            }
            if (rc > 0 && fds[0].revents)
                handle_signals(now);
            if (rc > 0 && fds[1].revents && !m_watchdog_dead)
                on_watchdog_gone(now);
        }
        // A renewal still in flight must not share its connections with the release.
        m_lock.abandon_renewal(Clock::now());
        m_child.reclaim_terminal();
        m_watchdog.disarm();
        if (m_lost)
            return util::exit_code::lease_lost;
        if (m_stopped_without_watchdog)
            return util::exit_code::internal;
        if (m_timed_out)
            return util::exit_code::max_hold;
        return process::exit_status_of(*m_program_status);
    }

  private:
    // The watchdog died (killed, or by the OOM killer): a stopped or starved redlock could
    // no longer keep PROGRAM from outliving the lease, so PROGRAM is stopped as on
    // --max-hold (TERM, KILL after the grace) while the lease is still renewed, and the run
    // ends as an internal error: fail closed, as when the watchdog cannot start.
    void on_watchdog_gone(Clock::time_point now) {
        m_watchdog_dead = true;
        if (m_program_status || m_lost)
            return;
        log::error("'{}': the watchdog (pid {}) is gone; without it PROGRAM could outlive the "
                   "lease if redlock were stopped, so stopping PROGRAM",
                   m_name, m_watchdog.pid());
        m_stopped_without_watchdog = true;
        if (!m_timed_out) {
            m_timed_out = true;
            m_max_hold_at = now;
            m_child.signal_tree(SIGTERM);
            m_child.signal_tree(SIGCONT);
        }
    }

    Clock::time_point term_at() const { return m_schedule.term_at(m_lock.validity_end()); }
    // Between TERM and KILL when PROGRAM is stopped with the lease still held.
    Millis stop_grace() const { return std::min<Millis>(m_schedule.grace, 5s); }

    // The next renewal: every ttl/3, but always well before the TERM deadline, even when a
    // slow acquisition ate into the lease, and at least two round trips before it: a
    // renewal's validity counts from when it was sent, so sending early costs nothing, and
    // with round trips near the TTL renewals simply follow each other.
    void schedule_renewal(Clock::time_point now) {
        auto lead = std::max<Clock::duration>(m_renew_interval / 2, 2 * m_lock.round_trip());
        m_next_renewal = std::min(now + m_renew_interval, term_at() - lead);
    }

    // Why the lease ran out with no failed renewal: which of redlock and the network was
    // too slow.
    std::string ran_out_why() const {
        if (m_renewal_failing)
            return "renewals failed until the lease ran out";
        if (m_lock.renewal_in_flight())
            return util::format(
                "a renewal was still unanswered when the lease ran out (the "
                "last round trip took {}); the servers are too slow for a ttl "
                "of {}",
                util::format_duration(std::chrono::ceil<Millis>(m_lock.round_trip())),
                util::format_duration(m_lock.ttl()));
        return "redlock was stopped or starved until the lease ran out";
    }

    // The loop itself failed (poll: out of memory): nothing can be supervised any more, so
    // nothing may run on. Kill the tree, wait for it, and report an internal error.
    int give_up(const std::string& why) {
        log::error("{}; stopping PROGRAM", why);
        m_child.signal_tree(SIGKILL);
        int status = 0;
        while (::waitpid(-1, &status, 0) > 0 || errno == EINTR) {
        }
        m_lock.abandon_renewal(Clock::now());
        m_child.reclaim_terminal();
        m_watchdog.disarm();
        return util::exit_code::internal;
    }
    Clock::time_point kill_at() const {
        return m_lost_kill_at ? *m_lost_kill_at : m_schedule.kill_at(m_lock.validity_end());
    }

    Clock::time_point next_wakeup(Clock::time_point now) const {
        auto wake = now + 60s;
        if (!m_lost) {
            wake = std::min(wake, term_at());
            if (m_lock.renewal_in_flight()) {
                wake = std::min(wake, m_lock.validity_end());
                if (auto d = redis::earliest_deadline(m_lock.connections()))
                    wake = std::min(wake, *d);
            } else {
                wake = std::min(wake, m_next_renewal);
            }
        } else if (m_children_remain || !m_program_status) {
            // Until the tree is gone: the KILL deadline, then SIGKILL again now and then in
            // case something forked in between.
            wake = std::min(wake, m_killed ? now + 50ms : kill_at());
        }
        if (m_max_hold_at && !m_program_status)
            wake = std::min(wake, m_timed_out ? *m_max_hold_at + stop_grace() : *m_max_hold_at);
        if (m_leftover_kill_at && !m_leftover_killed)
            wake = std::min(wake, *m_leftover_kill_at);
        else if (m_leftover_killed && m_children_remain)
            wake = std::min(wake, now + 50ms);
        return wake;
    }

    void act_on_deadlines(Clock::time_point now) {
        if (!m_lost) {
            if (now >= term_at()) {
                lose(now, ran_out_why(), false);
            } else if (!m_lock.renewal_in_flight() && now >= m_next_renewal) {
                m_lock.start_renewal(now);
                check_renewal(now); // a connect failure may decide it at once
            }
        }
        if (m_lost && now >= kill_at() && (m_children_remain || !m_program_status)) {
            if (!m_killed)
                log::verbose("'{}': sending SIGKILL to PROGRAM's processes", m_name);
            m_child.signal_tree(SIGKILL);
            m_killed = true;
        }
        // --max-hold: PROGRAM has run long enough. It is stopped as on a lost lease (TERM,
        // then KILL after the grace) while the lease is still renewed: the lock is ours
        // until PROGRAM is gone.
        if (m_max_hold_at && !m_program_status && !m_lost) {
            if (!m_timed_out && now >= *m_max_hold_at) {
                m_timed_out = true;
                log::error("'{}': PROGRAM ran for {} (--max-hold); stopping it", m_name,
                           util::format_duration(*m_max_hold));
                m_child.signal_tree(SIGTERM);
                m_child.signal_tree(SIGCONT);
            } else if (m_timed_out && now >= *m_max_hold_at + stop_grace()) {
                m_child.signal_tree(SIGKILL);
            }
        }
        if (m_leftover_kill_at && now >= *m_leftover_kill_at && m_children_remain) {
            m_child.signal_tree(SIGKILL);
            m_leftover_killed = true;
        }
    }

    void check_renewal(Clock::time_point now) {
        switch (m_lock.poll_renewal(now)) {
        case lock::RenewStatus::pending:
            return;
        case lock::RenewStatus::renewed:
            if (m_renewal_failing)
                log::note("renewing '{}' works again", m_name);
            m_renewal_failing = false;
            m_watchdog.update(term_at(), kill_at());
            if (log::verbose_enabled()) // see log::verbose
                log::verbose("renewed '{}': {}", m_name, lock::describe_round(m_lock.last_round()));
            schedule_renewal(now);
            return;
        case lock::RenewStatus::not_ours:
            lose(now, "the lock no longer holds our token", true);
            return;
        case lock::RenewStatus::failed:
            if (!m_renewal_failing)
                log::note("renewing '{}' failed, retrying: {}", m_name,
                          lock::describe_round(m_lock.last_round()));
            else
                log::verbose("renewing '{}' failed again: {}", m_name,
                             lock::describe_round(m_lock.last_round()));
            m_renewal_failing = true;
            m_next_renewal = now + m_retry_interval;
            return;
        }
    }

    void lose(Clock::time_point now, std::string_view why, bool at_once) {
        m_lost = true;
        m_lock.abandon_renewal(now);
        if (at_once) // someone else may hold it already: do not wait for the lease to run out
            m_lost_kill_at = std::min(kill_at(), now + stop_grace());
        // Said before PROGRAM's own reaction to TERM can reach the terminal, but only if
        // stderr takes it at once: a full pipe or a terminal stopped by ^S must not delay
        // the TERM (then it is said after).
        const auto message = util::format("lost the lock '{}': {}; stopping PROGRAM", m_name, why);
        const bool said = log::write_if_ready(message);
        m_child.signal_tree(SIGTERM);
        m_child.signal_tree(SIGCONT); // a stopped process acts on TERM only once continued
        m_watchdog.lost(kill_at());
        if (!said)
            log::write(message);
    }

    void handle_signals(Clock::time_point now) {
        for (int sig : m_signals.read_pending()) {
            if (sig == SIGCHLD) {
                auto reaped = process::reap_children(m_child.pid(), m_program_status);
                m_children_remain = reaped.children_remain;
                int stop = reaped.program_stopped_by;
                if ((stop == SIGTTIN || stop == SIGTTOU) && !m_program_status) {
                    // PROGRAM wants the terminal but is not the foreground job: left
                    // stopped, it would hold the lock forever (`run ... | cat`, `run &`).
                    auto suspended = m_child.hand_terminal_on_demand();
                    if (!suspended)
                        log::note("PROGRAM is stopped for terminal access: {}",
                                  suspended.error().message);
                    else if (*suspended && Clock::now() >= term_at())
                        lose(Clock::now(), "the job was suspended until the lease ran out", false);
                    else
                        m_child.signal_group(SIGCONT);
                } else if (stop == SIGTSTP && !m_program_status && m_child.has_terminal()) {
                    // Ctrl-Z: stop with PROGRAM. On resume PROGRAM continues only if the
                    // lease is still good; a suspended job does not keep its lock.
                    m_child.suspend_with_program();
                    if (Clock::now() >= term_at())
                        lose(Clock::now(), "the job was suspended until the lease ran out", false);
                    else
                        m_child.signal_group(SIGCONT);
                }
                if (m_program_status && m_children_remain && !m_leftover_kill_at && !m_lost) {
                    // PROGRAM is done but left processes behind: they must not go on
                    // unlocked, so stop them (TERM, then KILL) while we still hold the lease.
                    log::verbose("PROGRAM exited leaving processes behind; stopping them");
                    m_child.signal_tree(SIGTERM);
                    m_leftover_kill_at = now + stop_grace();
                }
            } else if (sig == SIGTSTP && !m_program_status) {
                // Ctrl-Z reached redlock, so PROGRAM is not the terminal's foreground job:
                // stop it too, stop ourselves, and on resume go on only with a good lease.
                m_child.signal_group(SIGSTOP);
                ::kill(::getpid(), SIGSTOP);
                if (Clock::now() >= term_at())
                    lose(Clock::now(), "the job was suspended until the lease ran out", false);
                else
                    m_child.signal_group(SIGCONT);
            } else if (process::is_forwarded(sig)) {
                log::verbose("forwarding signal {} to PROGRAM", sig);
                if (m_program_status)
                    m_child.signal_tree(sig);
                else
                    m_child.signal_group(sig);
                // As systemd and kill(1) do: a stopped PROGRAM acts on it once continued.
                m_child.signal_group(SIGCONT);
            }
        }
    }

    lock::Lock& m_lock;
    process::Child& m_child;
    process::SignalEvents& m_signals;
    process::Watchdog& m_watchdog;
    std::string m_name;
    StopSchedule m_schedule;
    std::optional<Millis> m_max_hold;
    std::optional<Clock::time_point> m_max_hold_at;
    bool m_timed_out = false; // --max-hold ran out (or the watchdog died): PROGRAM told to stop
    bool m_watchdog_dead = false;
    bool m_stopped_without_watchdog = false;

    Millis m_renew_interval;
    Millis m_retry_interval;
    Clock::time_point m_next_renewal;
    bool m_renewal_failing = false;

    std::optional<int> m_program_status; // wait status once PROGRAM has ended
    bool m_children_remain = true;
    bool m_lost = false;
    bool m_killed = false;
    std::optional<Clock::time_point> m_lost_kill_at;
    std::optional<Clock::time_point> m_leftover_kill_at;
    bool m_leftover_killed = false;
};

// A run started inside a run of the same NAME (flock's FLOCKER idiom): its environment names
// the lock (REDLOCK_KEY) and the outer run's token (REDLOCK_TOKEN). If that token holds the
// lock on a majority of these servers, PROGRAM replaces redlock at once, under the outer
// lock: the outer run renews it, stops PROGRAM with its own on a lost lease (PROGRAM is in
// its tree) and releases it; taking it again would wait on ourselves forever. Nothing in
// the environment is trusted unchecked: a token that is stale, forged, from other servers,
// or copied into a process outside the holder's tree makes this an ordinary run. Returns the exit
// status when nested (exec failed), nullopt when not.
std::optional<int> run_nested(const RunOptions& options, const config::Config& config) {
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
    if (!holder || holder->process.empty() ||
        !process::is_ancestor(static_cast<pid_t>(holder->pid), holder->process)) {
        log::note("'{}': REDLOCK_TOKEN holds it, but this process does not descend from its "
                  "holder ({}); taking it as an ordinary run",
                  options.name,
                  holder ? util::format("pid {} on {}", holder->pid, holder->host)
                         : std::string("its metadata is missing"));
        return std::nullopt;
    }
    if (options.max_hold || options.min_hold || options.once_per)
        log::note("'{}' is held by the run this one is nested in; --max-hold, --min-hold and "
                  "--once-per apply to that run, not here",
                  options.name);
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
        return report(util::Error{
            util::ErrorKind::unavailable,
            util::format("cannot tell the fence of the run this one is nested in: too few "
                         "servers answered to agree on it, and REDLOCK_FENCE is not one "
                         "they record; PROGRAM not started")});
    ::setenv("REDLOCK_FENCE", std::to_string(*fence).c_str(), 1);
    log::verbose("'{}' is held by the run this one is nested in (fence {}); running PROGRAM "
                 "under it",
                 options.name, *fence);
    return report(process::exec_in_place(options.program));
}

// --once-per: a run needs its slot as well as the lock (lock/scripts.hpp,
// k_claim_slot_script). A slot already run, or being run (its run claimed it), ends this
// run as a lock held elsewhere does: released, status 75 or -E. nullopt: claimed.
std::optional<int> claim_slot(lock::Lock& lock, const RunOptions& options,
                              const lock::Holder& holder, const config::Config& config) {
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
    note_release(options.name, lock.release());
    if (claim == lock::Lock::SlotClaim::failed)
        return report(util::Error{quorum_error(round).kind,
                                  util::format("cannot claim this {} slot of '{}': {}",
                                               util::format_duration(length), options.name,
                                               quorum_error(round).message)});
    std::string who;
    auto view = lock::inspect(lock.connections(), config.key_prefix, options.name, true);
    if (const auto& run = view.last_run)
        who = util::format(": {} started it at {}", holder_text(run->who),
                           util::format_utc_timestamp(util::UtcMillis(Millis(run->started_ms))));
    log::note("'{}' has already run in this {} slot{}", options.name, util::format_duration(length),
              who);
    return options.conflict_exit_code;
}

// --once-per, when PROGRAM could not be started after the slot was claimed (a typo in one
// host's crontab): a run that never began must not use up the slot, or the hosts that can
// run the job would skip it. The record says why, for status, and the slot is open again.
void give_back_slot(lock::Lock& lock, const RunOptions& options, const config::Config& config,
                    const util::Error& why) {
    if (options.once_per)
        lock.finish_slot(util::exit_status(why.kind), *options.once_per,
                         util::redact_secrets(why.message, known_secrets(config)));
}

} // namespace

int run_command(const RunOptions& options, const config::Config& config) {
    if (auto status = run_nested(options, config))
        return *status;
    auto signals = process::SignalEvents::open();
    if (!signals)
        return report(signals.error());

    auto holder = lock::current_holder(options.program, ::getpid(), known_secrets(config));
    holder.ttl_ms = options.ttl.count();
    const auto token = util::random_token();
    auto lock =
        make_lock(config, options.name, token, options.ttl, lock::holder_fields(holder, token));
    if (options.limit > 1)
        lock.set_limit(options.limit);
    auto acquired = acquire_waiting(lock, options.name, options.wait, *signals, options.fair,
                                    options.min_validity);
    if (auto status = unless_acquired(acquired, options.conflict_exit_code))
        return *status;
    const auto acquired_at = Clock::now();
    if (options.once_per)
        if (auto status = claim_slot(lock, options, holder, config))
            return *status;

    // A renewal must be answered well inside the lease; past a quarter of the TTL one slow
    // round trip more loses it. Said once, at the start, not when it is too late.
    if (lock.round_trip() > options.ttl / 4)
        log::note("acquiring '{}' took {} of its {} ttl; renewals may not keep up, use a ttl "
                  "of at least {}",
                  options.name, util::format_duration(std::chrono::ceil<Millis>(lock.round_trip())),
                  util::format_duration(options.ttl),
                  util::format_duration(std::chrono::ceil<Millis>(lock.round_trip()) * 10));
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
        note_release(options.name, lock.release());
        return report(util::Error{watchdog.error().kind,
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
        note_release(options.name, lock.release());
        return report(child.error());
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

    Supervisor supervisor(lock, *child, *signals, *watchdog, options.name, options.max_hold);
    int status = supervisor.run();
    if (options.once_per) // the slot's record says how the run ended; kept a slot at least
        lock.finish_slot(status, *options.once_per);
    // --min-hold: held at least D from acquiring. What is left of D becomes the lease
    // (compare-and-pexpire, as a renewal) instead of a release; it then simply expires.
    // Not after a lost lease (the lock is not ours), nor for the last few milliseconds.
    if (options.min_hold && status != util::exit_code::lease_lost) {
        auto left = std::chrono::ceil<Millis>(acquired_at + *options.min_hold - Clock::now());
        if (left >= 10ms) {
            if (lock.extend(left) == lock::RenewStatus::renewed) {
                log::verbose("'{}' stays held for {} more (--min-hold {})", options.name,
                             util::format_duration(left), util::format_duration(*options.min_hold));
                return status;
            }
            log::verbose("'{}': could not keep it for the rest of --min-hold; releasing it: {}",
                         options.name, lock::describe_round(lock.last_round()));
        }
    }
    note_release(options.name, lock.release());
    return status;
}

} // namespace redlock::cli
