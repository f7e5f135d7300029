#pragma once
// What the engine reports as a job goes, and the interface it reports to, as ninja's
// builder reports to its Status: the engine does not print. The messages and the progress
// line on stderr are one observer (cli/stderr_observer.hpp); a run's history, metrics and
// systemd notifications are others. Observers are called on the engine's thread when the
// thing happens, in order, and must not block or slow the locking: no network round trip,
// no fsync, nothing that waits. `-v` diagnostics that only a person debugging reads (which
// server said what, why a waiter slept) still go to util::log directly.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lock/holder.hpp"
#include "lock/inspect.hpp"
#include "lock/lock.hpp"

namespace redlock::job {

using Clock = lock::Clock;
using Millis = std::chrono::milliseconds;

// How a run ended: the words `history`, metrics and --events use.
enum class Outcome {
    ran,            // PROGRAM ran and exited (its status is the run's)
    lost,           // the lease was lost; PROGRAM was stopped (79)
    force_released, // release --force took the lock away; PROGRAM was stopped (79)
    max_hold,       // --max-hold ran out; PROGRAM was stopped (124)
    skipped_held,   // not acquired: held by another owner (75 or -E)
    skipped_slot,   // --once-per: this slot has been run already (75 or -E)
    gave_up,        // --wait ran out (75 or -E)
    interrupted,    // a signal ended the wait (128+N)
    stopped,        // PROGRAM stopped by redlock for another reason, such as the watchdog gone (70)
    failed,         // an error before PROGRAM ran: servers, config, exec (its kind's status)
    killed,         // redlock itself was killed (or crashed): told by its releaser (dead_run.hpp)
    // A cron slot (job/cron_slot.hpp) not run: an earlier slot's run still ran, or no host
    // could run it within its catch-up window. Recorded once, fleet-wide.
    skipped_overlap,
    missed,
};
[[nodiscard]] const char* outcome_name(Outcome outcome);
// Every outcome, in the order above (metrics list each one, 0 until it happens).
inline constexpr Outcome k_outcomes[] = {
    Outcome::ran,          Outcome::lost,         Outcome::force_released, Outcome::max_hold,
    Outcome::skipped_held, Outcome::skipped_slot, Outcome::gave_up,        Outcome::interrupted,
    Outcome::stopped,      Outcome::failed,       Outcome::killed,         Outcome::skipped_overlap,
    Outcome::missed};

// While waiting: who holds the lock, as far as the servers said.
struct Waiting {
    std::string_view name;
    Clock::time_point started;
    std::optional<Clock::time_point> give_up{}; // --wait
    bool holder_read = false;                   // false: not known (changed hands meanwhile)
    std::optional<lock::Holder> holder{};       // nullopt with holder_read: no redlock metadata
    size_t other_holders = 0;                   // --limit: the other permits' holders
    std::optional<long long> queue_position{};  // --fair: 0 at the head
};

struct Acquired {
    std::string_view name;
    long long fence = 0;
    size_t permit = 0; // --limit: which permit, 1..N; 0 without
    size_t limit = 0;
    size_t attempts = 0;
    Clock::duration waited{};
    size_t fence_copies = 0;
    const std::vector<lock::ServerResult>& servers;
};

// Why the lock was not acquired.
struct NotAcquired {
    std::string_view name;
    enum class Why {
        held,         // -n (or -w 0): held by another owner
        wait_ran_out, // --wait ran out
        min_validity, // --wait ran out, every acquisition leaving too little validity
    } why = Why::held;
    std::string_view held_by; // "held by another owner", "held: none of its 3 permits is free"
    std::optional<Millis> wait;
    std::optional<Millis> min_validity;
};

enum class StopReason {
    lease_lost,     // renewals failed, or the key no longer holds our token
    force_released, // release --force took it: as a lost lease, and `why` names who
    max_hold,       // --max-hold ran out
    watchdog_gone,  // the watchdog died: fail closed
    leftovers,      // PROGRAM exited leaving processes behind
    internal,       // redlock's own loop failed: PROGRAM killed at once
};

class Observer {
  public:
    virtual ~Observer() = default;

    // A person should read this (a note: a slow round trip, a release that missed a
    // server...). No other observer acts on notices.
    virtual void notice(std::string_view /*text*/) {}

    // The first attempt found the lock held: waiting starts (`round`: the attempt).
    virtual void wait_started(std::string_view /*name*/, std::string_view /*held_by*/,
                              const std::vector<lock::ServerResult>& /*round*/) {}
    // Who holds it, when the wait starts and again after it changed hands.
    virtual void waiting(const Waiting& /*state*/) {}
    // Time passes while waiting; returns when it wants to be called again.
    virtual Clock::time_point tick(Clock::time_point /*now*/) { return Clock::time_point::max(); }
    // Whether the holder is worth a look at the servers while waiting (a round trip now
    // and then): for `waiting` events.
    [[nodiscard]] virtual bool wants_holder() const { return false; }
    // The wait is over, however it ended (acquired, not, interrupted, an error).
    virtual void wait_ended() {}
    virtual void acquired(const Acquired& /*what*/) {}
    virtual void not_acquired(const NotAcquired& /*what*/) {}
    virtual void interrupted(int /*signal*/) {}

    // --once-per: this slot's run happened already (`last`: its record, when read).
    virtual void slot_taken(std::string_view /*name*/, Millis /*slot*/,
                            const std::optional<lock::LastRun>& /*last*/) {}

    virtual void program_started(long /*pid*/) {}
    virtual void renewed(const std::vector<lock::ServerResult>& /*round*/) {}
    // A renewal failed (`first`: the first of a run of failures; redlock retries).
    virtual void renewal_failed(const std::vector<lock::ServerResult>& /*round*/, bool /*first*/) {}
    virtual void renewal_recovered() {}
    // PROGRAM is being stopped; `why` says more. For a lost lease this comes before the
    // SIGTERM, which must not wait for it: an observer that cannot say it at once keeps it
    // for catch_up(), called once the signals are out.
    virtual void stopping(StopReason /*reason*/, std::string_view /*why*/) {}
    virtual void catch_up() {}
    // PROGRAM's exit (its wait status), or the run's end when PROGRAM was stopped.
    virtual void program_exited(int /*wait_status*/) {}

    // The release, per server; or, with --min-hold, the lock kept for `left` instead.
    virtual void released(const std::vector<lock::ServerResult>& /*round*/) {}
    virtual void kept(Millis /*left*/, Millis /*min_hold*/) {}
};

// Several observers as one, in order.
class Observers final : public Observer {
  public:
    void add(Observer& observer) { m_all.push_back(&observer); }

    void notice(std::string_view text) override {
        for (auto* o : m_all)
            o->notice(text);
    }
    void wait_started(std::string_view name, std::string_view held_by,
                      const std::vector<lock::ServerResult>& round) override {
        for (auto* o : m_all)
            o->wait_started(name, held_by, round);
    }
    void waiting(const Waiting& state) override {
        for (auto* o : m_all)
            o->waiting(state);
    }
    Clock::time_point tick(Clock::time_point now) override {
        auto next = Clock::time_point::max();
        for (auto* o : m_all)
            next = std::min(next, o->tick(now));
        return next;
    }
    [[nodiscard]] bool wants_holder() const override {
        for (auto* o : m_all)
            if (o->wants_holder())
                return true;
        return false;
    }
    void wait_ended() override {
        for (auto* o : m_all)
            o->wait_ended();
    }
    void acquired(const Acquired& what) override {
        for (auto* o : m_all)
            o->acquired(what);
    }
    void not_acquired(const NotAcquired& what) override {
        for (auto* o : m_all)
            o->not_acquired(what);
    }
    void interrupted(int signal) override {
        for (auto* o : m_all)
            o->interrupted(signal);
    }
    void slot_taken(std::string_view name, Millis slot,
                    const std::optional<lock::LastRun>& last) override {
        for (auto* o : m_all)
            o->slot_taken(name, slot, last);
    }
    void program_started(long pid) override {
        for (auto* o : m_all)
            o->program_started(pid);
    }
    void renewed(const std::vector<lock::ServerResult>& round) override {
        for (auto* o : m_all)
            o->renewed(round);
    }
    void renewal_failed(const std::vector<lock::ServerResult>& round, bool first) override {
        for (auto* o : m_all)
            o->renewal_failed(round, first);
    }
    void renewal_recovered() override {
        for (auto* o : m_all)
            o->renewal_recovered();
    }
    void stopping(StopReason reason, std::string_view why) override {
        for (auto* o : m_all)
            o->stopping(reason, why);
    }
    void catch_up() override {
        for (auto* o : m_all)
            o->catch_up();
    }
    void program_exited(int wait_status) override {
        for (auto* o : m_all)
            o->program_exited(wait_status);
    }
    void released(const std::vector<lock::ServerResult>& round) override {
        for (auto* o : m_all)
            o->released(round);
    }
    void kept(Millis left, Millis min_hold) override {
        for (auto* o : m_all)
            o->kept(left, min_hold);
    }

  private:
    std::vector<Observer*> m_all;
};

} // namespace redlock::job
