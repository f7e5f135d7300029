#include "job/supervise.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis/fanout.hpp"
#include "redis/subscription.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"
#include "util/format.hpp"
#include "util/log.hpp"
#include "util/random.hpp"

namespace redlock::job {

namespace {

using namespace std::chrono_literals;
namespace log = util::log;

class Supervisor {
  public:
    Supervisor(lock::Lock& lock, process::Child& child, process::SignalEvents& signals,
               process::Watchdog& watchdog, std::string name, std::optional<Millis> max_hold,
               Observer& observer)
        : m_lock(lock), m_child(child), m_signals(signals), m_watchdog(watchdog),
          m_observer(observer), m_name(std::move(name)), m_schedule(lock.ttl()),
          m_max_hold(max_hold), m_renewals(lock.ttl()) {
        if (max_hold)
            m_max_hold_at = Clock::now() + *max_hold;
        schedule_renewal(Clock::now());
    }

    Supervised run() {
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
            // Observers with something to do in time (systemd's WATCHDOG=1, a hook to
            // start once PROGRAM has been signalled) say when to wake them.
            m_tick_at = m_observer.tick(now);

            if (!m_lost && !m_program_status && now >= m_listen_at && !listening())
                listen();

            fds.clear();
            fds.push_back(pollfd{m_signals.fd(), POLLIN, 0});
            // No events asked: poll() says POLLERR once the watchdog, the pipe's reader, is gone.
            fds.push_back(pollfd{m_watchdog_dead ? -1 : m_watchdog.pipe_fd(), 0, 0});
            redis::add_pollfds(m_lock.connections(), fds);
            const size_t connecting_at = fds.size();
            if (m_listen)
                redis::add_pollfds(m_listen->connecting(), fds);
            const size_t notices_at = fds.size();
            if (m_listen)
                m_listen->add_pollfds(fds);
            now = Clock::now(); // act_on_deadlines may have taken a while (/proc scans)
            int rc = ::poll(fds.data(), fds.size(), util::poll_timeout_ms(now, next_wakeup(now)));
            if (rc < 0 && errno != EINTR)
                return give_up(util::format("poll: {}", std::strerror(errno)));
            now = Clock::now();
            // Back past the lease's end by more than the watchdog's grace (redlock stopped
            // or starved there): the watchdog has signalled PROGRAM by now, on that end. A
            // renewal whose reply comes in this same wake cannot undo that: the lease is
            // lost here, before the reply is read, and the run ends as lost (79), not as
            // PROGRAM's TERM.
            if (!m_lost && now >= term_at() + process::Watchdog::k_term_grace)
                lose(now, ran_out_why(), false);
            const std::span<const pollfd> all(fds);
            // The notices first: who forced a release is known before a renewal's "not
            // ours" that came in the same wake is reported.
            const bool renewing = m_lock.renewal_in_flight();
            if (m_listen) {
                redis::dispatch(m_listen->connecting(),
                                all.subspan(connecting_at, notices_at - connecting_at), now);
                if (m_listen->on_events(all.subspan(notices_at)))
                    on_notice(now);
                m_listen->settle();
            }
            if (renewing) {
                redis::dispatch(m_lock.connections(), all.subspan(2, connecting_at - 2), now);
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
        m_observer.program_exited(*m_program_status);
        if (m_lost)
            return {Supervised::End::lost, *m_program_status, m_forced_by, m_forwarded};
        if (m_stopped_without_watchdog)
            return {Supervised::End::stopped, *m_program_status, {}, m_forwarded};
        if (m_timed_out)
            return {Supervised::End::max_hold, *m_program_status, {}, m_forwarded};
        return {Supervised::End::exited, *m_program_status, {}, m_forwarded};
    }

  private:
    // The holder listens to its own lock's events channel (on two of the servers): a
    // `release --force` says "forced" there, and is heard within a round trip instead of
    // at the next renewal, up to a third of the ttl later. Not the release channel, which
    // is the waiters' (`watch` counts its subscribers as waiting runs). Not before PROGRAM
    // has run k_listen_after: a short job is done before it could matter, and pays
    // nothing for it.
    static constexpr Millis k_listen_after{100};

    // Subscribed (or subscribing) on every server it can be.
    [[nodiscard]] bool listening() const {
        return m_listen && !m_listen->lost() && !m_listen->incomplete();
    }

    // Again when a subscription was lost (a server restarted, CLIENT KILL) or could not be
    // made, at most once a second: a notice missed meanwhile is the next renewal's to find.
    void listen() {
        m_listen_at = Clock::now() + 1s;
        if (m_listen) {
            m_listen->start_subscribe();
            return;
        }
        std::vector<config::ServerConfig> servers;
        for (const auto& c : m_lock.connections())
            servers.push_back(c.server());
        while (servers.size() > 2)
            servers.erase(servers.begin() +
                          static_cast<std::ptrdiff_t>(util::random_index(servers.size())));
        m_listen.emplace(servers, m_lock.events_channel());
        m_listen->only_forced_about(lock::release_id(m_lock.token()));
        m_listen->start_subscribe();
    }

    void start_renewal(Clock::time_point now) {
        m_lock.start_renewal(now);
        m_renewal_started = now;
    }

    // A "forced" notice about our token on our lock's events channel while we hold it:
    // someone released it by force, or says so (anyone may publish there). A renewal
    // started now says whether it is still ours; until then who is only a claim.
    void on_notice(Clock::time_point now) {
        if (m_lost || m_program_status)
            return;
        if (auto who = m_listen->take_forced_by()) {
            m_forcer = std::move(who);
            m_forcer_heard = now;
        }
        log::verbose("'{}': a release was announced; checking the lock", m_name);
        if (!m_lock.renewal_in_flight()) {
            start_renewal(now);
            check_renewal(now);
        }
    }

    // A renewal renewed: a forcer heard before it started is forgotten (the notice was
    // false); one heard since it started needs another look, at once.
    void judge_forcer(Clock::time_point now) {
        if (!m_forcer)
            return;
        if (m_renewal_started >= m_forcer_heard)
            m_forcer.reset();
        else
            m_next_renewal = now;
    }

    // Why the lock is not ours any more: released by force (a notice about our token said
    // by whom), or simply gone.
    std::string not_ours_why() {
        if (m_forcer) {
            const auto& by = *m_forcer;
            lock::Holder who;
            who.host = by.host;
            who.pid = static_cast<long>(by.pid);
            who.user = by.user;
            m_forced_by = who;
            return util::format("it was released by force by {}@{} (pid {})", by.user, by.host,
                                by.pid);
        }
        return "the lock no longer holds our token";
    }

    // The watchdog died (killed, or by the OOM killer): a stopped or starved redlock could
    // no longer keep PROGRAM from outliving the lease, so PROGRAM is stopped as on
    // --max-hold (TERM, KILL after the grace) while the lease is still renewed, and the run
    // ends as an internal error: fail closed, as when the watchdog cannot start.
    void on_watchdog_gone(Clock::time_point now) {
        m_watchdog_dead = true;
        if (m_program_status || m_lost)
            return;
        m_stopped_without_watchdog = true;
        m_observer.stopping(StopReason::watchdog_gone,
                            util::format("the watchdog (pid {}) is gone; without it PROGRAM could "
                                         "outlive the lease if redlock were stopped",
                                         m_watchdog.pid()));
        if (!m_timed_out) {
            m_timed_out = true;
            m_max_hold_at = now;
            m_child.signal_tree(SIGTERM);
            m_child.signal_tree(SIGCONT);
        }
    }

    Clock::time_point term_at() const { return m_schedule.term_at(m_lock.validity_end()); }
    Millis stop_grace() const { return m_schedule.stop_grace(); }

    void schedule_renewal(Clock::time_point now) {
        m_next_renewal = m_renewals.next(now, term_at(), m_lock.round_trip());
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
    Supervised give_up(const std::string& why) {
        m_observer.stopping(StopReason::internal, why);
        m_child.signal_tree(SIGKILL);
        int status = 0;
        while (::waitpid(-1, &status, 0) > 0 || errno == EINTR) {
        }
        m_lock.abandon_renewal(Clock::now());
        m_child.reclaim_terminal();
        return {Supervised::End::stopped, status};
    }
    Clock::time_point kill_at() const {
        return m_lost_kill_at ? *m_lost_kill_at : m_schedule.kill_at(m_lock.validity_end());
    }

    Clock::time_point next_wakeup(Clock::time_point now) const {
        auto wake = std::min(now + 60s, m_tick_at);
        if (!m_lost) {
            wake = std::min(wake, term_at());
            if (!listening() && !m_program_status)
                wake = std::min(wake, m_listen_at);
            else if (m_listen)
                if (auto d = redis::earliest_deadline(m_listen->connecting()))
                    wake = std::min(wake, *d);
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
                start_renewal(now);
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
                m_observer.stopping(StopReason::max_hold,
                                    util::format("PROGRAM ran for {} (--max-hold)",
                                                 util::format_duration(*m_max_hold)));
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
                m_observer.renewal_recovered();
            m_renewal_failing = false;
            m_watchdog.update(term_at(), kill_at());
            m_observer.renewed(m_lock.last_round());
            schedule_renewal(now);
            judge_forcer(now);
            return;
        case lock::RenewStatus::not_ours: {
            auto why = not_ours_why();
            lose(now, why, true, m_forced_by ? StopReason::force_released : StopReason::lease_lost);
            return;
        }
        case lock::RenewStatus::failed:
            m_observer.renewal_failed(m_lock.last_round(), !m_renewal_failing);
            m_renewal_failing = true;
            m_next_renewal = now + m_renewals.retry;
            return;
        }
    }

    void lose(Clock::time_point now, std::string_view why, bool at_once,
              StopReason reason = StopReason::lease_lost) {
        m_lost = true;
        m_lock.abandon_renewal(now);
        if (at_once) // someone else may hold it already: do not wait for the lease to run out
            m_lost_kill_at = std::min(kill_at(), now + stop_grace());
        // Said before PROGRAM's own reaction to TERM can reach the terminal, but never
        // delaying the TERM: what an observer cannot say at once, it says in catch_up().
        m_observer.stopping(reason, why);
        m_child.signal_tree(SIGTERM);
        m_child.signal_tree(SIGCONT); // a stopped process acts on TERM only once continued
        m_watchdog.lost(kill_at());
        m_observer.catch_up();
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
                        m_observer.notice(util::format("PROGRAM is stopped for terminal access: {}",
                                                       suspended.error().message));
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
                    m_observer.stopping(StopReason::leftovers,
                                        "PROGRAM exited leaving processes behind");
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
                m_forwarded = sig;
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
    Observer& m_observer;
    std::string m_name;
    StopSchedule m_schedule;
    std::optional<Millis> m_max_hold;
    std::optional<Clock::time_point> m_max_hold_at;
    bool m_timed_out = false; // --max-hold ran out (or the watchdog died): PROGRAM told to stop
    bool m_watchdog_dead = false;
    bool m_stopped_without_watchdog = false;

    Clock::time_point m_tick_at = Clock::time_point::max(); // the observers' next tick
    RenewalSchedule m_renewals;
    std::optional<redis::Subscription> m_listen;
    Clock::time_point m_listen_at = Clock::now() + k_listen_after;
    std::optional<lock::Holder> m_forced_by;
    std::optional<redis::Subscription::Forcer> m_forcer; // heard, not yet confirmed
    Clock::time_point m_forcer_heard{};
    Clock::time_point m_renewal_started{};
    Clock::time_point m_next_renewal;
    bool m_renewal_failing = false;

    std::optional<int> m_program_status; // wait status once PROGRAM has ended
    int m_forwarded = 0;                 // the last signal passed on to PROGRAM
    bool m_children_remain = true;
    bool m_lost = false;
    bool m_killed = false;
    std::optional<Clock::time_point> m_lost_kill_at;
    std::optional<Clock::time_point> m_leftover_kill_at;
    bool m_leftover_killed = false;
};

} // namespace

Supervised supervise(lock::Lock& lock, process::Child& child, process::SignalEvents& signals,
                     process::Watchdog& watchdog, std::string name, std::optional<Millis> max_hold,
                     Observer& observer) {
    observer.program_started(static_cast<long>(child.pid()));
    return Supervisor(lock, child, signals, watchdog, std::move(name), max_hold, observer).run();
}

} // namespace redlock::job
