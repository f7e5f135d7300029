#include "job/acquire.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <limits>
#include <map>
#include <poll.h>
#include <set>
#include <unistd.h>

#include "job/wait_policy.hpp"
#include "lock/holder.hpp"
#include "lock/keys.hpp"
#include "lock/name.hpp"
#include "lock/reap.hpp"
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

Millis random_jitter(Millis low, Millis high) {
    return util::random_between(low, high);
}

// The first forwarded signal pending, or 0 when only others (CHLD, CONT) woke us. Ctrl-Z
// while waiting stops redlock as it would any command (it holds no lock yet).
int first_forwarded(process::SignalEvents& signals) {
    int found = 0;
    for (int sig : signals.read_pending()) {
        if (sig == SIGTSTP)
            ::kill(::getpid(), SIGSTOP);
        else if (process::is_forwarded(sig) && found == 0)
            found = sig;
    }
    return found;
}

// Sleeps until `until`, a release notice (`notices`, if any) or a forwarded signal;
// returns that signal, else 0.
int sleep_interruptibly(process::SignalEvents& signals, Clock::time_point until,
                        redis::Subscription* notices = nullptr, bool* noticed = nullptr) {
    std::vector<pollfd> fds;
    for (;;) {
        auto now = Clock::now();
        if (now >= until)
            return 0;
        auto wake = until;
        if (notices)
            wake = std::min(wake, notices->next_deadline().value_or(until));
        fds.assign(1, pollfd{signals.fd(), POLLIN, 0});
        if (notices)
            notices->add_pollfds(fds);
        int rc = ::poll(fds.data(), fds.size(), util::poll_timeout_ms(now, wake));
        if (rc < 0 && errno != EINTR)
            return 0;
        if (rc > 0 && fds[0].revents)
            if (int sig = first_forwarded(signals))
                return sig;
        if ((rc > 0 && notices && notices->on_events(std::span<const pollfd>(fds).subspan(1))) ||
            (notices && notices->expire(Clock::now()))) {
            if (noticed)
                *noticed = true;
            return 0;
        }
    }
}

// A failed attempt is released where it may have written; where the server refused that
// release (an ACL without DEL), our key stays until its TTL: say so, once per server. (A
// release behind a refused AUTH that ran all the same left nothing.)
void note_failed_cleanup(const lock::Lock& lock, std::string_view name, Observer& observer) {
    static std::set<std::string> noted;
    for (const auto& r : lock.last_cleanup())
        if (r.vote == lock::ServerResult::Vote::failed && r.auth_failure && !r.ran_anyway &&
            noted.insert(r.server).second)
            observer.notice(util::format("could not clean up after a failed attempt on '{}' at "
                                         "{} ({}); the key there expires by its ttl",
                                         name, r.server, r.detail));
}

// Who holds the lock, as a look at the holders' metadata read it (lock::read_holders),
// into `state`: the first holder named, and for a --limit name how many other permits'
// holders. None named: not known (released meanwhile, changing hands, or no metadata).
void holder_from(std::span<const lock::HeldBy> seen, lock::Lock& lock, Waiting& state) {
    state.holder_read = !seen.empty();
    state.holder.reset();
    state.other_holders = 0;
    if (!seen.empty())
        state.holder = seen.front().holder;
    std::vector<size_t> permits;
    for (const auto& s : seen)
        if (std::ranges::find(permits, s.permit) == permits.end())
            permits.push_back(s.permit);
    if (lock.limit() > 0 && !permits.empty())
        state.other_holders = permits.size() - 1;
    if (lock.fair())
        state.queue_position = lock.queue_position();
}

// This machine and boot, and who asks, as the lock's own metadata names them (written with
// each attempt: lock/holder.hpp); empty when the run writes none.
lock::Holder here_of(const lock::Lock& lock) {
    lock::Holder here;
    here.host = lock.holder_field("host");
    here.pid = std::strtol(std::string(lock.holder_field("pid")).c_str(), nullptr, 10);
    here.user = lock.holder_field("user");
    here.machine = lock.holder_field("machine");
    here.boot = lock.holder_field("boot");
    return here;
}

// A lock found held, by `seen`: a holder that names this machine under another boot is
// judged by the one rule of lock/reap.hpp, on its lease, read now with the lock. Proven
// not to have renewed since this machine booted, it is reaped, with the waiters woken and
// the entry `reaped`; otherwise it is left, and the run says why (once: the caller looks
// at its first "held" only). Returns true when something was released: the caller tries
// again at once.
bool take_over(lock::Lock& lock, std::string_view name, const WaitPolicy& policy,
               Observer& observer, const lock::Holder& here, std::span<const lock::HeldBy> seen) {
    if (!lock::any_of_another_boot(seen, here))
        return false;
    // Over a majority (a frozen server must not hold up the run): a renewal that counted
    // reached a majority, so one of those read shows it.
    const auto view = lock::inspect(lock.connections(), lock.name_keys(), name, true);
    std::vector<config::ServerConfig> servers;
    for (const auto& c : lock.connections())
        servers.push_back(c.server());
    bool released = false;
    for (const auto& t : lock::takeovers(view, lock::this_boot(here))) {
        const auto& h = t.held.holder;
        const std::string which = util::format(
            "'{}'{}", name,
            t.held.permit > 0 ? util::format(" (permit {})", t.held.permit) : std::string());
        const std::string who =
            util::format("{}@{}, pid {}, since {}", h.user, h.host, h.pid, h.acquired_at);
        if (!t.verdict.take) {
            observer.notice(util::format("{} is held by this machine's identity under another "
                                         "boot ({}); not taken over: {}",
                                         which, who, t.verdict.why));
            continue;
        }
        const size_t n =
            lock::tally_of(lock::reap(servers, lock.name_keys(), lock.limit(), t,
                                      {here, policy.history_keep, policy.history_max_age}))
                .yes;
        released |= n > 0;
        observer.notice(
            util::format("{} was held by this machine under an earlier boot ({}), {}: {}", which,
                         who, t.verdict.why,
                         n > 0 ? "reaped" : "not released (gone already, or the servers refused)"));
    }
    return released;
}

// The servers a waiter listens to for release notices. Every release goes to every
// server, so any one's notice wakes; each notice costs every waiter a wake-up, which in a
// crowd over five servers on two cores was a fifth of the time. So two: a second covers
// one that goes down; chosen at random (the load spreads) among those that answered the
// last attempt (not one frozen or down); all of them when fewer answered.
constexpr size_t k_notice_servers = 2;

// How long a waiter that a notice woke, and that the leader told "held", waits for another
// notice before it tries every server at once (wait_and_acquire).
constexpr Millis k_leader_confirm{100};

// How long a release notice from the other server waits for the leader's own, which says
// that an attempt there can succeed (redis::Subscription::set_primary).
constexpr Millis k_primary_grace{20};

struct NoticeServers {
    std::vector<config::ServerConfig> servers;
    std::optional<size_t> leader; // its place among them, when listened to first
};

NoticeServers notice_servers(lock::Lock& lock, const lock::AcquireResult& attempt,
                             bool with_leader) {
    std::vector<config::ServerConfig> answered;
    std::vector<config::ServerConfig> all;
    const auto& conns = lock.connections();
    for (size_t i = 0; i < conns.size(); ++i) {
        all.push_back(conns[i].server());
        const auto vote =
            i < attempt.servers.size() ? attempt.servers[i].vote : lock::ServerResult::Vote::none;
        if ((vote == lock::ServerResult::Vote::yes || vote == lock::ServerResult::Vote::no) &&
            !(with_leader && i == lock.leader()))
            answered.push_back(conns[i].server());
    }
    // Attempts go to the leader first: it sees every acquisition and every release that
    // matters, the clean-up of an attempt that lost included, which only the servers it
    // was written to announce. So the leader, and one other in case it goes down.
    const size_t others = with_leader ? k_notice_servers - 1 : k_notice_servers;
    if (answered.size() < others)
        return {all, with_leader ? std::optional(lock.leader()) : std::nullopt};
    while (answered.size() > others)
        answered.erase(answered.begin() +
                       static_cast<std::ptrdiff_t>(util::random_index(answered.size())));
    if (!with_leader)
        return {answered, std::nullopt};
    answered.push_back(conns[lock.leader()].server());
    return {answered, answered.size() - 1};
}

// Subscribes `notices` before the next attempt, so that a release after it cannot pass
// unnoticed, and one before it is seen by the attempt. A waiter listens on its own wake
// channel, on every server, and enlists: a release then wakes the first two waiters of the
// wait list (or of the --fair queue), not the crowd (lock/scripts.hpp, k_wake). Over
// several servers a plain lock's waiter, woken, tries the leader first; the leader's notice
// counts first. A waiter the ACL refuses its own channel listens to the release channel on
// two servers, as before 0.3: each release wakes them all.
// Returns true when listening on the wake channel.
bool listen(lock::Lock& lock, std::optional<redis::Subscription>& notices,
            const lock::AcquireResult& attempt, bool with_leader, std::string_view name) {
    if (lock.enlisted()) {
        std::vector<config::ServerConfig> all;
        for (const auto& c : lock.connections())
            all.push_back(c.server());
        notices.emplace(all, lock.wake_channel());
        if (with_leader)
            notices->set_primary(lock.leader(), k_primary_grace);
        notices->subscribe();
        if (notices->live() > 0 || notices->incomplete())
            return true;
        log::verbose("cannot subscribe to the wake channel of '{}'; listening to its releases",
                     name);
        lock.stop_enlisting();
    }
    auto [servers, leader] = notice_servers(lock, attempt, with_leader);
    notices.emplace(servers, lock.release_channel());
    if (leader)
        notices->set_primary(*leader, k_primary_grace);
    notices->subscribe();
    if (notices->live() == 0)
        log::verbose("cannot subscribe to releases of '{}'; retrying now and then", name);
    return false;
}

util::Expected<Acquisition> wait_and_acquire(lock::Lock& lock, std::string_view name,
                                             const WaitPolicy& policy,
                                             process::SignalEvents& signals, Observer& observer,
                                             const lock::HistoryRecord* skip, bool& everywhere) {
    const auto wait = policy.wait;
    const auto min_validity = policy.min_validity;
    const auto started = Clock::now();
    std::optional<Clock::time_point> give_up;
    if (wait)
        give_up = started + *wait;
    size_t attempts = 0;
    size_t too_slow = 0;                        // in a row
    std::optional<redis::Subscription> notices; // wake-ups, once the lock was held
    std::optional<Waiting> waiting;             // once waiting really starts
    bool noticed = false;                       // the last sleep ended with a notice
    Clock::time_point holder_read{}; // when the progress line's holder was last looked up
    // Over several servers, a plain lock: an attempt a notice set off goes to the leader
    // first (Lock::acquire), as long as the leader answers. The two woken meet there, and
    // one wins.
    const bool by_leader = lock.connections().size() > 1 && lock.limit() == 0 && !lock.fair();
    bool leader_next = false;
    // Whether the holder was looked at, for reaping (take_over) and for the "waiting for"
    // line: once, at the first "held".
    bool looked_at_holder = false;
    std::optional<std::vector<lock::HeldBy>> first_look; // for the line, once
    // The refusal goes out once: an attempt interrupted by a stray signal (the SIGCHLD of
    // a background release) and made again must not record it twice.
    bool refusal_sent = false;
    // A run that may wait goes on the wait list with its first attempt that finds the lock
    // held (a --limit name's: every permit held).
    if (!wait || wait->count() > 0)
        lock.enlist();
    for (;;) {
        ++attempts;
        // The last attempt (-n, or --wait run out) records a refusal in the history, in
        // the same write: skipped-held, or gave-up after waiting.
        std::optional<lock::HistoryRecord> refusal;
        if (skip && give_up && Clock::now() >= *give_up && looked_at_holder && !refusal_sent) {
            refusal_sent = true;
            refusal = *skip;
            refusal->skip = true;
            refusal->ended = Clock::now();
            refusal->waited = std::chrono::floor<Millis>(*refusal->ended - started);
            refusal->add("outcome", wait->count() == 0 ? "skipped-held" : "gave-up");
        }
        auto attempt = lock.acquire(signals.fd(), leader_next, refusal ? &*refusal : nullptr);
        if (refusal)
            for (const auto& failure : lock.history_failures())
                log::verbose("history not written on {}", failure);
        note_failed_cleanup(lock, name, observer);
        if (!attempt)
            return util::fail(attempt.error().kind,
                              util::format("cannot lock '{}': {}", name, attempt.error().message));
        if (attempt->status == lock::AcquireStatus::acquired && min_validity &&
            lock.validity_end() - Clock::now() < *min_validity) {
            // --min-validity: too little of the lease is left to start on; the attempt is
            // released and counts as not acquired (the lock was free: try again soon).
            auto left = std::chrono::floor<Millis>(lock.validity_end() - Clock::now());
            log::verbose("acquired '{}' with {} of validity left, less than --min-validity {}; "
                         "released",
                         name, util::format_duration(std::max(left, Millis(0))),
                         util::format_duration(*min_validity));
            (void)lock.release();
            if (give_up && Clock::now() >= *give_up) {
                observer.not_acquired({name, NotAcquired::Why::min_validity, held_by_others(lock),
                                       wait, min_validity});
                return Acquisition{Acquisition::Outcome::gave_up, 0};
            }
            if (int sig =
                    sleep_interruptibly(signals, Clock::now() + util::random_between(10ms, 50ms)))
                return Acquisition{Acquisition::Outcome::interrupted, sig};
            continue;
        }
        if (attempt->status == lock::AcquireStatus::acquired) {
            everywhere = std::ranges::all_of(attempt->servers, [](const auto& s) {
                return s.vote == lock::ServerResult::Vote::yes;
            });
            observer.acquired(Acquired{name, attempt->fence, lock.permit(), lock.limit(), attempts,
                                       Clock::now() - started, attempt->fence_copies,
                                       attempt->servers});
            return Acquisition{Acquisition::Outcome::acquired, 0};
        }
        if (attempt->status == lock::AcquireStatus::interrupted) {
            // A SIGCONT after Ctrl-Z or a stray SIGCHLD is no reason to stop: try again.
            if (int sig = first_forwarded(signals))
                return Acquisition{Acquisition::Outcome::interrupted, sig};
            continue;
        }
        if (attempt->status == lock::AcquireStatus::held && !looked_at_holder) {
            looked_at_holder = true;
            const auto here = here_of(lock);
            const bool may_reap = !here.machine.empty() && !here.boot.empty();
            if (may_reap || observer.wants_holder())
                first_look = lock::read_holders(lock.connections(), lock.name_keys(), lock.limit());
            if (may_reap && take_over(lock, name, policy, observer, here, *first_look)) {
                first_look.reset();
                continue;
            }
            // A single attempt (-n) made without its refusal, to record none if the lock
            // could be reaped: once more, with it.
            if (skip && give_up && Clock::now() >= *give_up)
                continue;
        }
        auto now = Clock::now();
        too_slow = attempt->status == lock::AcquireStatus::too_slow ? too_slow + 1 : 0;
        // Once may be a hiccup (a server forking for a snapshot); three times in a row the
        // servers are simply too far away for this TTL, and waiting longer will not help.
        if (too_slow >= 3 || (too_slow > 0 && give_up && now >= *give_up)) {
            auto took = std::chrono::ceil<Millis>(attempt->elapsed);
            return util::fail(
                util::ErrorKind::unavailable,
                util::format("cannot lock '{}': the servers said yes, but the round trip took "
                             "{} of the {} ttl, leaving no validity; use a ttl of at least {}",
                             name, util::format_duration(took), util::format_duration(lock.ttl()),
                             util::format_duration(std::max(took * 10, Millis(100)))));
        }
        if (too_slow > 0) {
            log::verbose("acquiring '{}' took {:.1f}ms, longer than the lease allows; retrying",
                         name, std::chrono::duration<double, std::milli>(attempt->elapsed).count());
        } else if (give_up && now >= *give_up) {
            const bool once = wait->count() == 0;
            observer.not_acquired({name,
                                   once ? NotAcquired::Why::held : NotAcquired::Why::wait_ran_out,
                                   held_by_others(lock), wait, min_validity});
            return Acquisition{once ? Acquisition::Outcome::held : Acquisition::Outcome::gave_up,
                               0};
        }
        if (attempts == 1 && too_slow == 0)
            observer.wait_started(name, held_by_others(lock), attempt->servers);
        const bool leader_held = attempt->leader_only; // the others not asked
        // The attempts after a notice go to the leader first, as long as it answers. (One not
        // waited for may be a server still connecting or frozen.)
        bool leader_answers = false;
        if (by_leader) {
            const auto vote = attempt->servers[lock.leader()].vote;
            leader_answers =
                vote == lock::ServerResult::Vote::yes || vote == lock::ServerResult::Vote::no;
        }
        // Subscribed, then looked at again: the first time, and whenever a subscription was
        // lost (a release may have passed unheard). On the wait list, the look is whether we
        // are still on it: a release since the attempt that enlisted us would have found
        // nobody on our channel, taken us off, and woken the next instead; then try again.
        if (too_slow == 0 && (!notices || notices->lost())) {
            const bool woken_by_list = listen(lock, notices, *attempt, leader_answers, name);
            leader_next = false;
            if (!woken_by_list || !lock.listed())
                continue;
        }
        if (notices && notices->incomplete())
            notices->subscribe(); // a server down or frozen before: it may be back
        // Without a notice, until the holder's lease could have run out (a holder that
        // died sends none), jittered: on a majority, or where the leader alone was asked,
        // there. With no subscription at all, a short jittered retry, as waiters without
        // pub/sub must.
        std::optional<Millis> expiry;
        if (leader_held) {
            const auto pttl = attempt->servers[lock.leader()].held_pttl;
            if (pttl >= 0)
                expiry = Millis(pttl);
        } else {
            expiry = until_expiry(attempt->servers);
        }
        const bool listening = notices && notices->live() > 0;
        auto until = sleep_until({.now = now,
                                  .expiry = expiry,
                                  .listening = listening,
                                  .too_slow = too_slow > 0,
                                  // the queue wakes its head on its own channel
                                  .fair = lock.fair() && !(listening && lock.enlisted()),
                                  .give_up = give_up},
                                 random_jitter);
        // Who holds it: when the wait starts, and after a release gave it to someone else,
        // but not more than once a second (the terminal line's pace).
        if (too_slow == 0 && (!waiting || (noticed && now - holder_read >= 1s))) {
            if (!waiting)
                waiting.emplace(Waiting{.name = name, .started = started, .give_up = give_up});
            // Read over the lock's own connections (idle between attempts), but the first
            // time: the look at the first "held" is still fresh.
            if (observer.wants_holder())
                holder_from(first_look ? *first_look
                                       : lock::read_holders(lock.connections(), lock.name_keys(),
                                                            lock.limit()),
                            lock, *waiting);
            first_look.reset();
            observer.waiting(*waiting);
            holder_read = now;
        }
        // Woken, the leader alone said "held": most likely the other one woken won there.
        // But it may be a key left on the leader alone (a release that failed there, a
        // holder that won without it), which only expiry clears: unless another notice
        // comes first, one attempt on every server at once, soon, settles it.
        const bool confirm = noticed && leader_held;
        if (confirm)
            until = std::min(until, now + k_leader_confirm + random_jitter(0ms, 20ms));
        // Woken, tried everywhere, held on a majority: the release that woke us may not have
        // reached them yet (their servers busy, their requests in flight). Their own notices
        // of it, ignored so far as repeats, now wake us again; a holder that won meanwhile
        // costs at most one attempt more.
        if (noticed && !leader_held && notices)
            notices->hear_again();
        noticed = false;
        for (;;) {
            auto next = waiting ? observer.tick(Clock::now()) : Clock::time_point::max();
            if (int sig = sleep_interruptibly(signals, std::min(until, next),
                                              notices ? &*notices : nullptr, &noticed))
                return Acquisition{Acquisition::Outcome::interrupted, sig};
            // Second in line: only if the first has not taken it by now (and then the
            // permit it freed is no news either).
            if (noticed && notices->standby_woke() && !lock.looks_free()) {
                (void)notices->take_freed_permit();
                noticed = false;
                continue;
            }
            if (noticed || Clock::now() >= until)
                break;
        }
        // Woken: straight to the leader, where only one of those woken can win. At the
        // holder's expiry (no notice: it may have died, or the leader's key may be one
        // left there alone), every server at once.
        leader_next = by_leader && leader_answers && noticed;
        // Woken by a permit's release: that permit first, not the held ones in turn.
        if (const size_t freed = notices ? notices->take_freed_permit() : 0; freed && noticed)
            lock.prefer_permit(freed);
    }
}

} // namespace

util::Expected<Acquisition> acquire(lock::Lock& lock, std::string_view name,
                                    const WaitPolicy& policy, process::SignalEvents& signals,
                                    Observer& observer, const lock::HistoryRecord* skip) {
    // --fair takes its place in the queue first: arrival order is the order of tickets.
    // A single attempt (-n) has no use for one.
    if (policy.fair && (!policy.wait || policy.wait->count() > 0)) {
        if (auto ticket = lock.take_ticket(); !ticket)
            return util::fail(ticket.error().kind,
                              util::format("cannot lock '{}': {}", name, ticket.error().message));
        else
            log::verbose("'{}': waiting in line with ticket {}", name, *ticket);
    }
    bool everywhere = false; // acquired on every server
    auto result = wait_and_acquire(lock, name, policy, signals, observer, skip, everywhere);
    observer.wait_ended();
    if (result && result->outcome == Acquisition::Outcome::interrupted)
        observer.interrupted(result->signal);
    // A waiter that stops waiting gives its place up at once. One that acquired has left
    // the queue where it set the lock; over several servers, there may be others where its
    // attempt found the lock still held (or did not answer), and its place there would hold
    // up the next: it leaves those, unless it set the lock on every one. (Its place on the
    // wait list there costs the next release a look: it is not left for.)
    if (!result || result->outcome != Acquisition::Outcome::acquired ||
        (lock.fair() && lock.connections().size() > 1 && !everywhere))
        lock.leave_queue();
    return result;
}

lock::Lock make_lock(const config::Config& config, const std::string& name, std::string token,
                     Millis ttl, std::vector<std::string> holder) {
    lock::Lock lock(config.servers, lock::Keys(config.key_prefix, name), std::move(token), ttl,
                    std::move(holder));
    lock.keep_record(config.history_max_age);
    return lock;
}

std::vector<std::string> known_secrets(const config::Config& config) {
    std::vector<std::string> out;
    for (const auto& s : config.servers)
        if (s.url.password && !s.url.password->empty())
            out.push_back(*s.url.password);
    if (const char* auth = std::getenv("REDISCLI_AUTH"); auth && *auth)
        out.emplace_back(auth);
    return out;
}

std::string held_by_others(const lock::Lock& lock) {
    if (lock.limit() > 1)
        return util::format("held: none of its {} permits is free", lock.limit());
    return "held by another owner";
}

} // namespace redlock::job
