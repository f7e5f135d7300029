#pragma once
// Reading locks without taking them: who holds a lock on each server, merged into one view
// by the same majority rule the lock itself uses; listing locks with SCAN; removing a lock
// by force (compare-and-delete of exactly the tokens that were shown).

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "lock/history.hpp"
#include "lock/holder.hpp"
#include "lock/keys.hpp"
#include "redis/connection.hpp"
#include "util/error.hpp"

namespace redlock::lock {

// The record of the last --once-per run of a lock, on one server's clock (Unix ms).
struct LastRun {
    long long slot = 0;    // the slot it ran for: it began at slot * slot_ms
    long long slot_ms = 0; // the slot length, --once-per
    Holder who;            // host, pid, user, command
    long long started_ms = 0;
    std::optional<long long> ended_ms; // nullopt while it runs (or if it never said)
    std::optional<int> status;         // its exit status
    // Why PROGRAM could not be started (not found, not executable): the slot was not used
    // up. nullopt when it started (or has not said yet).
    std::optional<std::string> start_error;
};

// The record of a `redlock cron` job's slots (lock/cron_scripts.hpp), on one server's clock
// (Unix ms): its latest slot decided, and the job's schedule as the claim of it saw it.
struct CronRecord {
    long long slot_ms = 0;
    std::string state;                // running, done, lost, killed, interrupted, missed...
    std::optional<long long> next_ms; // the job's next fire after that slot
    std::string schedule;
    std::string zone;
    std::optional<long long> skipped_ms; // the latest slot skipped by an overlap
    std::optional<long long> started_ms; // its run's start and end
    std::optional<long long> ended_ms;
    std::optional<int> status;
    std::string host; // who ran it
};

// The cron fields of a name's record (c, cs, ...: lock/cron_scripts.hpp) as the read scripts
// return them; nullopt when it has none (or not believable ones).
[[nodiscard]] std::optional<CronRecord>
parse_cron_record(const std::map<std::string, std::string>& fields);

// Whether server record `a` tells more of the last run than `b`: a later slot; in one slot
// the run that started later (a run that could not start gave the slot back); of one run,
// the record that saw it end (the end is written with the release, which returns once a
// majority has it: the others may still have only the start).
[[nodiscard]] bool tells_more(const LastRun& a, const LastRun& b);

struct ServerView {
    std::string server;
    bool reachable = false;
    std::string error; // why it could not be read
    bool auth_error = false;
    std::optional<std::string> token; // nullopt: free on this server (or wrong_type)
    long long ttl_ms = -2;            // PTTL: -2 free, -1 no expiry
    std::optional<Holder> holder;
    std::optional<long long> fence; // the fence counter; nullopt: never set on this server
    // The fence the holder's metadata records here (its acquisition's, once a majority
    // has it); nullopt without metadata.
    std::optional<long long> holder_fence;
    // The lock key exists but is not a string (say, a hash someone wrote there): not a
    // lock of redlock's or of any SET NX client, yet it keeps the name from being taken.
    bool wrong_type = false;
    std::optional<LastRun> last_run;
    std::optional<CronRecord> cron;
};

enum class LockState { free, held, unknown };

struct LockView {
    std::string name;
    std::string key;
    LockState state = LockState::unknown;
    std::optional<std::string> token; // the majority's token when held
    long long ttl_ms = -2;            // until fewer than a majority hold it
    std::optional<Holder> holder;     // nullopt when held by a client without metadata
    // Held: the holder's fence, as the metadata of a majority of all the servers records
    // it; nullopt when the servers that answered cannot tell. Otherwise (free, or a
    // holder without metadata) the largest counter read: the last fence given out, or
    // past it where an attempt that lost incremented a minority of the counters.
    std::optional<long long> fence;
    std::vector<ServerView> servers;
    size_t reachable = 0;
    bool wrong_type = false; // held because a majority have a key of the wrong type
    // The latest --once-per run recorded on any server (the largest slot).
    std::optional<LastRun> last_run;
    // A cron job's: the latest slot any server recorded (of one slot, the record that saw
    // its run end).
    std::optional<CronRecord> cron;
    // The newest run in the name's history (lock/history.hpp), when it was read.
    std::optional<HistoryEntry> latest_run;
    // A semaphore (--limit N): N, and each permit read as a lock of its own (state: held
    // when any permit is). 0 and empty for a plain lock.
    size_t limit = 0;
    std::vector<LockView> permits;

    // A semaphore's permits that are held.
    [[nodiscard]] std::vector<const LockView*> held_permits() const {
        std::vector<const LockView*> held;
        for (const auto& permit : permits)
            if (permit.state == LockState::held)
                held.push_back(&permit);
        return held;
    }
};

[[nodiscard]] const char* state_name(LockState state);

// One server's reply to k_inspect_script ({token, pttl, metadata, fence, slot record}, five
// elements) into `sv`, which it marks reachable.
void read_inspect_reply(const redisReply& reply, ServerView& sv);
// The same from what was read: the token (nullopt: free), its PTTL, the metadata hash, the
// fence counter's text, the --once-per record's hash.
void read_server_view(std::optional<std::string> token, long long pttl,
                      const std::map<std::string, std::string>& meta,
                      std::optional<std::string_view> fence,
                      std::map<std::string, std::string> slot, ServerView& sv);

// One lock's views on each of the servers (all of them, in order: those that could not be
// read marked unreachable; a key of the wrong type with its PTTL) merged by the majority
// rule: held by the token a majority holds, for as long as a majority still holds it.
[[nodiscard]] LockView merge_servers(std::string name, std::string key,
                                     std::vector<ServerView> servers);

// Reads one lock on every server at once, waiting for each (up to its timeouts); with
// `majority_only`, only until a majority answered (the others read as unreachable).
[[nodiscard]] LockView inspect(std::span<redis::Connection> conns, std::string_view prefix,
                               std::string_view name, bool majority_only = false);
// The same for the lock `keys` of `name`.
[[nodiscard]] LockView inspect(std::span<redis::Connection> conns, const Keys& keys,
                               std::string_view name, bool majority_only = false);

// `text` as a Redis glob that matches it and nothing else: * ? [ ] and \ escaped.
[[nodiscard]] std::string glob_escape(std::string_view text);

// Names of the locks under `prefix` matching the glob `pattern`, from every server, merged
// and sorted. Servers that could not be scanned are returned in `failures`. With
// `majority_only`, each step waits for a majority of the servers and a moment more
// (k_list_stragglers), not for the others' timeouts: those are failures then. With
// `companion` (k_record_suffix), the names of the companion keys of that suffix too (names
// whose lock is free, but whose record is there).
struct ListResult {
    std::vector<std::string> names;
    std::vector<ServerView> failures;
    size_t scanned = 0;
    std::vector<bool> cluster; // per server: a Redis Cluster node (its masters were scanned)
};
[[nodiscard]] ListResult list_names(std::span<redis::Connection> conns, std::string_view prefix,
                                    std::string_view pattern, bool majority_only = false,
                                    std::string_view companion = {});

// list_names a step at a time, for a caller with other work between two steps (the
// exporter answers HTTP while it lists 100,000 names): the constructor asks whether the
// servers are cluster nodes, each step() sends one SCAN to every server not done and waits
// for it as list_names does.
class NameScan {
  public:
    NameScan(std::span<redis::Connection> conns, std::string_view prefix, std::string_view pattern,
             bool majority_only = false, std::string_view companion = {});
    ~NameScan();
    NameScan(const NameScan&) = delete;
    NameScan& operator=(const NameScan&) = delete;

    // One SCAN round; false once every server is done (or failed).
    bool step();
    // The servers that failed so far (as in ListResult).
    [[nodiscard]] const std::vector<ServerView>& failures() const { return m_result.failures; }
    [[nodiscard]] ListResult result() &&;

  private:
    std::string m_prefix;
    std::string m_companion;
    std::vector<redis::Connection> m_nodes; // a cluster's masters, scanned in its place
    std::span<redis::Connection> m_conns;   // what is scanned: the servers, or m_nodes
    size_t m_wait_for = 0;
    std::vector<std::string> m_matches; // the lock keys' glob, then the companion's
    std::vector<std::string> m_cursors;
    std::vector<bool> m_done;
    std::vector<size_t> m_stage; // per server: in m_matches
    std::set<std::string> m_names;
    ListResult m_result;
    int m_rounds = 0;
};
inline constexpr auto k_list_stragglers = std::chrono::milliseconds(20);

// Waits for the requests in flight on `conns`: for every one, or once `wait_for` of the
// connections have answered, k_list_stragglers more at most (the rest are then abandoned).
void wait_for_answers(std::span<redis::Connection> conns, size_t wait_for);

// Deletes the lock on each server where it still holds the token `view` showed there, or
// where it still is a key of the wrong type if `view` showed that. Returns the number of
// servers where it was deleted.
// The operator's side: who forces the release (said to the holder on the events
// channel, "forced ID HOST PID USER" with ID its token's release_id, so that it stops at
// once and names them), and the
// history entry recorded with the release (nullopt: none).
struct ForceRelease {
    std::string host;
    long long pid = 0;
    std::string user;
    std::optional<HistoryRecord> record;
};
size_t force_release(std::span<redis::Connection> conns, const LockView& view,
                     const ForceRelease& by);

// The error when no server could be read at all (unavailable, or auth).
[[nodiscard]] util::Error unreadable_error(const std::vector<ServerView>& servers);

} // namespace redlock::lock
