#pragma once
// The lock itself, over one Redis server or several (the Redlock algorithm); one server is
// simply the case N=1. Every request goes to all servers at once. A lock counts only with
// a majority of yes answers and positive validity, measured on CLOCK_BOOTTIME from before the
// first request was sent: ttl - elapsed - (ttl*0.01 + 2ms).
//
// Acquire is SET key token NX PX ttl (plus the holder's metadata), renew and release are
// compare-and-pexpire and compare-and-delete; all are Lua scripts (lock/scripts.hpp) sent as
// EVALSHA with EVAL on NOSCRIPT, so a lock that expired is never re-created and one that is
// not ours is never touched.
//
// Every acquisition also gets a fence: an integer that is larger for every acquisition that
// starts after another one completed, and never shared by two holders, even when their
// holds overlap (a pause, an expired lease). Each server's acquire script increments its
// counter when it sets the lock and returns it. One server: that is the fence. Over N
// servers the counter is a majority max-register: with a majority won, the fence is the
// largest counter among the yes replies. When they all agree, those servers (a majority)
// hold the fence already and PROGRAM may start; otherwise round 2 writes it, "raise to the
// fence while our token is there", and the acquisition counts only once a majority of the
// servers whose round-1 yes was received confirmed it within the validity. Any later
// winner's round-1 majority meets those servers and increments one of them past the
// fence, so its fence is larger (tests/model/ checks this exhaustively, and that skipping
// round 2 needs round 1 to increment). A counter lives in the name's record, which expires
// when the name has not been used for the history's age; one that is not there starts
// from the server's clock, past every fence given before (lock/scripts.hpp, k_fence_take).

#include <array>
#include <chrono>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "lock/history.hpp"
#include "lock/keys.hpp"
#include "lock/quorum.hpp"
#include "lock/round.hpp"
#include "lock/scripts.hpp"
#include "redis/connection.hpp"
#include "util/error.hpp"

namespace redlock::lock {

using Clock = redis::Clock;
using Millis = std::chrono::milliseconds;

enum class AcquireStatus {
    acquired,
    held,
    interrupted,
    too_slow, // a majority said yes, but the round trips used up the whole validity
};

struct AcquireResult {
    AcquireStatus status = AcquireStatus::held;
    long long fence = 0; // when acquired
    // Servers that have the fence (all that said yes in time, the counter raised by round 2
    // where their replies differed): the fence survives
    // counters lost on fence_copies - (N - majority) - 1 of them, any minority when all N
    // (and a lost counter starts again from the clock: docs/safety.md).
    size_t fence_copies = 0;
    Clock::time_point validity_end{};
    Clock::duration elapsed{};
    std::vector<ServerResult> servers;
    // leader_first: held, as the leader alone said; the other servers were not asked.
    bool leader_only = false;
};

enum class RenewStatus { pending, renewed, not_ours, failed };

class Lock {
  public:
    // The lock whose keys are `keys`; `holder` is written to the metadata at acquisition
    // (field/value pairs from holder_fields), may be empty.
    Lock(const std::vector<config::ServerConfig>& servers, Keys keys, std::string token, Millis ttl,
         std::vector<std::string> holder = {});

    // --limit N: a semaphore of N permits, each a lock of its own under the name's keys
    // (lock/scripts.hpp, k_acquire_permit_script). Every acquire() then tries the permits,
    // from a random one on (or prefer_permit's), and takes the first it can; key() is then
    // that permit's.
    void set_limit(size_t permits);
    // Makes key() permit 1..N's (extend and release of a permit's holder).
    void use_permit(size_t permit);
    // The next acquire() tries permit 1..N first: the one a release just freed (its notice
    // says which, redis::Subscription::take_freed_permit), instead of a random one.
    void prefer_permit(size_t permit) { m_preferred_permit = permit; }
    [[nodiscard]] size_t limit() const { return m_limit; }
    // The permit held (1..N) after acquiring with a limit; 0 without one.
    [[nodiscard]] size_t permit() const { return m_permit; }
    // The channel releases of this name are announced on (every permit's alike).
    [[nodiscard]] std::string release_channel() const;
    // {<key>}:events: what `watch` and a running holder hear (lock/keys.hpp).
    [[nodiscard]] std::string events_channel() const;

    [[nodiscard]] const std::string& key() const { return m_keys.lock; }
    // The name's own lock key (key() is a permit's with a limit).
    [[nodiscard]] const std::string& name_key() const { return m_name.lock; }
    // The keys of the name.
    [[nodiscard]] const Keys& name_keys() const { return m_name; }
    // How long the name's record is kept from now on by what this lock writes: the history's
    // age, or two --once-per slots of `slot` if longer (lock/keys.hpp). By default the
    // default age.
    void keep_record(Millis age, std::optional<Millis> slot = std::nullopt) {
        m_record_age = age;
        m_slot = slot.value_or(Millis(0));
    }
    [[nodiscard]] const std::string& token() const { return m_token; }
    // A field of the holder's metadata as the last attempt wrote it ("" if none).
    [[nodiscard]] std::string_view holder_field(std::string_view name) const;
    // The fence of the last successful acquire(); 0 before.
    [[nodiscard]] long long fence() const { return m_fence; }
    [[nodiscard]] Millis ttl() const { return m_ttl; }
    [[nodiscard]] size_t server_count() const { return m_conns.size(); }

    // One attempt on all servers at once. "Held" is a normal result; too few servers
    // reachable is an error (unavailable, or auth when a server refused us). A failed
    // attempt releases on every server, since a SET that timed out may still have landed.
    // Returns `interrupted` (after releasing) if `interrupt_fd` becomes readable.
    //
    // `leader_first` (several servers, a plain lock): the leader() first, the others only
    // once it said yes (or failed). Waiters that a release wakes all at once then meet at
    // one server, where one of them wins and the others hear "held" at once, instead of
    // splitting the votes so that nobody has a majority. A "held" from the leader alone is
    // returned with the other servers not asked (Vote::none, not written). It is the same
    // Redlock attempt, its validity counted from the leader's request; it costs the winner
    // one round trip more.
    // `skip`: the record of a refusal, for the last attempt of a run that will not wait on
    // (history.hpp): sent with the attempt, it is written where the lock is held.
    [[nodiscard]] util::Expected<AcquireResult>
    acquire(int interrupt_fd = -1, bool leader_first = false, const HistoryRecord* skip = nullptr);
    // The server contenders for this name try first with leader_first: the same one for
    // every contender that lists the same servers (in any order), spread over the servers
    // for different names (rendezvous hashing of the name with each server's address).
    [[nodiscard]] size_t leader() const;

    // --fair: takes a place in the queue of waiters (a ticket, the largest of the servers'
    // INCR over a majority); from then on every acquire() keeps that place alive and goes
    // on only at the head of the queue. leave_queue() gives the place up (a waiter that
    // stops waiting), or without --fair the place on the wait list; acquiring leaves it
    // by itself.
    [[nodiscard]] util::Expected<long long> take_ticket();
    void leave_queue();
    // Our place in the queue, 0 at its head, as a majority of the servers see it (the
    // first time after listed(), as that saw it).
    [[nodiscard]] std::optional<long long> queue_position();
    // A waiter whose last attempt is older than this is dropped from the queue; waiters
    // attempt at least every k_fair_heartbeat.
    static constexpr Millis k_drop_waiter{3000};
    // (With a wake channel, the queue wakes its head, and the others sleep longer.)
    static constexpr Millis k_fair_heartbeat{1000};
    // How long, at least, servers still to answer are waited for once a majority said yes.
    static constexpr Millis k_straggler_grace{1};
    // How long, at least, a leader_first attempt waits for the leader before going on
    // without it (four times the last round trip when that is longer).
    static constexpr Millis k_leader_patience{10};
    [[nodiscard]] bool fair() const { return m_ticket.has_value(); }
    [[nodiscard]] std::optional<long long> ticket() const { return m_ticket; }
    // Our id as a waiter, and whether we may be in line (on the wait list, or in the
    // --fair queue) on some server.
    [[nodiscard]] const std::string& waiter() const { return m_waiter; }
    [[nodiscard]] bool in_line() const { return m_ticket.has_value() || m_listed; }
    // Takes the place in line of a waiter that is gone (its id, --fair ticket, and whether
    // it may be on the wait list), for leave_queue() on its behalf (job/dead_run.hpp).
    void take_place_of(std::string waiter, std::optional<long long> ticket, bool listed);
    // Called before every attempt goes out, its token (and permit) set: a run's will
    // records them (job/will.hpp), so that an attempt cut short by a kill is released.
    void before_attempt(std::function<void(const Lock&)> hook) {
        m_before_attempt = std::move(hook);
    }

    // A waiter's own wake channel ({<key>}:w:<id>, lock/keys.hpp): a release wakes the first
    // waiters of the wait list (or of the --fair queue) there, not all of them. Once
    // enlisted, a waiter's attempts put it on the wait list where the lock is held, in the
    // order it started waiting (the --fair queue is one already); listed() says whether it
    // is still there on a majority (a release that found nobody on its channel, before it
    // subscribed, took it off). looks_free(): whether a majority has no key (a PTTL each).
    [[nodiscard]] std::string wake_channel() const { return m_name.wake + m_waiter; }
    void enlist();
    void stop_enlisting() { m_enlisted_at.reset(); }
    [[nodiscard]] bool enlisted() const { return m_enlisted_at.has_value(); }
    [[nodiscard]] bool listed();
    [[nodiscard]] bool looks_free();

    // Renewal, driven by the caller's poll loop through connections().
    void start_renewal(Clock::time_point now);
    [[nodiscard]] bool renewal_in_flight() const { return m_renewing; }
    // The state of the round in flight; once decided, the round is closed and, when
    // renewed, validity_end() moves forward.
    [[nodiscard]] RenewStatus poll_renewal(Clock::time_point now);
    // Gives up on the round in flight (the lease ran out while it was pending).
    void abandon_renewal(Clock::time_point now);
    [[nodiscard]] Clock::time_point validity_end() const { return m_validity_end; }
    // How long the last successful acquisition or renewal took, send to decision: what a
    // renewal must be started ahead of the lease's end by.
    [[nodiscard]] Clock::duration round_trip() const { return m_round_trip; }
    [[nodiscard]] std::span<redis::Connection> connections() { return m_conns; }
    [[nodiscard]] const std::vector<ServerResult>& last_round() const { return m_last_round; }
    // The release that cleaned up after the last failed acquire() (empty if none was
    // needed): a server that failed there keeps our key until its TTL runs out.
    [[nodiscard]] const std::vector<ServerResult>& last_cleanup() const { return m_last_cleanup; }

    // Blocking compare-and-pexpire to `ttl` on every server at once (for `redlock extend`
    // and the end of --min-hold): renewed with a majority, not_ours when a majority is
    // impossible because the token is not there, failed when too few servers answered.
    // Where it cuts the lease short, the waiters are told, as by a release.
    [[nodiscard]] RenewStatus extend(Millis ttl, const HistoryRecord* record = nullptr);

    // --once-per: claims the current slot, `length` long and counted on each server's
    // clock from the Unix epoch, for the run `run` (its id) holding this lock
    // (lock/scripts.hpp, k_claim_slot_script); a run starting up to `early` before a slot
    // begins counts for that slot. `fields` (host, pid, user, command pairs) are recorded
    // with it. claimed: by a majority; done: a majority is out of reach and some server has
    // the slot's run recorded; failed: otherwise (too few answered, or the lock no longer
    // holds our token).
    enum class SlotClaim { claimed, done, failed };
    [[nodiscard]] SlotClaim claim_slot(Millis length, Millis early, std::string_view run,
                                       std::span<const std::string> fields);
    // Records the end and exit status of the run `run` in its slot record, of slots of
    // `length`; waits for a majority only. A `start_error` (why PROGRAM could not be
    // started) is recorded too, and gives the slot back: another run may claim it.
    void finish_slot(std::string_view run, int exit_status, Millis length,
                     std::string_view start_error = {});

    // Compare-and-delete on every server; does not wait on stragglers once a majority has
    // answered (the key there expires by its TTL; a request not yet written is finished in
    // the background). Without a majority, waits for `until`. Returns per-server results.
    enum class ReleaseWait {
        every_answer, // every server answers or fails: the results say what happened
        majority,     // also stop once a majority cannot answer (cleanup of an attempt)
    };
    // With `record`, the run's history entry goes in the same write.
    std::vector<ServerResult> release(ReleaseWait until = ReleaseWait::every_answer,
                                      const std::vector<bool>& only = {},
                                      const HistoryRecord* record = nullptr);
    // Where the last history entry sent (with a release, an extend or a refused attempt)
    // was refused ("server: error"); empty when it was written wherever it was answered.
    [[nodiscard]] const std::vector<std::string>& history_failures() const {
        return m_history_failures;
    }

  private:
    // One attempt on the current key (the lock's, or one permit's).
    [[nodiscard]] util::Expected<AcquireResult> acquire_key(int interrupt_fd, bool leader_first,
                                                            const HistoryRecord* skip = nullptr);
    // The history script's call for `record` (EVAL: it goes after another request).
    [[nodiscard]] std::string history_command(const HistoryRecord& record) const;
    // Reads the history script's replies (the last pipelined) into m_history_failures.
    void note_history(const std::vector<bool>& only = {});
    // The keys every script of this lock takes: the lock, its metadata and the name's record,
    // and for a permit the name's lock key and limit.
    [[nodiscard]] std::vector<std::string> script_keys() const;
    // What the scripts that give out a fence take after their own: the record's keeping
    // (the history's age, a --once-per slot) and the fence's field (k_fence_take).
    [[nodiscard]] std::array<std::string, 3> fence_args() const;
    [[nodiscard]] const Script& renew_script() const;
    void forget_renewal(); // the renewal commands, of an earlier token or keys
    // Round 2 over several servers, when their round-1 replies differ: writes `fence` where
    // round 1 said yes (`yes_servers`) and judges it by the servers in that set only. True
    // when a majority confirmed.
    [[nodiscard]] bool write_fence(const std::vector<size_t>& yes_servers, long long fence,
                                   int interrupt_fd, std::vector<ServerResult>& results);
    Tally tally() const;
    // Sends `command` to every server; the integer replies once a majority gave one.
    [[nodiscard]] std::optional<std::vector<long long>>
    integers_from_majority(const std::string& command);
    [[nodiscard]] std::string queue_key() const;
    [[nodiscard]] std::string waiting_key() const;
    std::vector<ServerResult> collect() const;
    // To every server, or to those that are true in `only` (when not empty).
    // With `after`, that command is pipelined behind each request, in the same write. An
    // empty `command` (EVALSHA) sends `fallback` (EVAL) everywhere.
    void send_all(const std::string& command, const std::string& fallback, Clock::time_point now,
                  const std::vector<bool>& only = {}, const std::string& after = {});
    // send_all for a lock write: on a server with replicas = N, WAIT N follows it.
    void send_writes(const std::string& command, const std::string& fallback, Clock::time_point now,
                     const std::vector<bool>& only = {}, const std::string& after = {});
    [[nodiscard]] std::string wait_command(const redis::Connection& conn) const;
    RenewStatus judge_renewal(Clock::time_point sent, Clock::time_point now) const;

    std::vector<redis::Connection> m_conns;
    // The keys the lock scripts take: the name's, or with a limit the permit's (its fence
    // field in the name's record, and the 0.4 counter it takes over).
    struct LockKeys {
        std::string lock, meta, fence_field, old_fence;
    } m_keys;
    Keys m_name;        // the name's
    size_t m_limit = 0; // --limit N; 0 for a plain lock
    size_t m_permit = 0;
    size_t m_preferred_permit = 0; // prefer_permit(); 0: none
    std::string m_token;           // this attempt's (fresh for each attempt after the first)
    std::string m_waiter;          // our id as a waiter: on the wait list, in the --fair queue
    std::optional<long long> m_enlisted_at; // enlist(): when, in ms since the Unix epoch
    bool m_listed = false;                  // an attempt may have put us on the wait list
    size_t m_attempts = 0;
    long long m_fence = 0;
    std::optional<long long> m_ticket; // --fair
    // Our place in the queue as listed() last read it (the furthest back), for the next
    // queue_position() alone, before the next attempt.
    std::optional<long long> m_known_position;
    std::function<void(const Lock&)> m_before_attempt;
    std::vector<std::string> m_holder;
    Millis m_ttl;
    Millis m_record_age = config::k_history_max_age; // keep_record()
    Millis m_slot{0};
    bool m_renewing = false;
    Clock::time_point m_renew_sent{};
    Clock::time_point m_validity_end{};
    Clock::duration m_round_trip{};
    std::vector<ServerResult> m_last_round;
    std::vector<ServerResult> m_last_cleanup;
    std::vector<std::string> m_history_failures;
    std::string m_renew_command;
    std::string m_renew_fallback;
    mutable std::optional<size_t> m_leader; // leader(), worked out once
};

} // namespace redlock::lock
