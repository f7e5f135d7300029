#pragma once
// Reading many locks at once, for the fleet view: one command per name and server
// (fleet/read_script.hpp), pipelined in batches to every server at once, and merged per
// name by the majority rule of lock/inspect. A reading waits for a majority of the servers
// and then as long again as they took (k_stragglers at least), never for a frozen one's
// timeouts; a server that missed a batch is not asked again in the same reading (it counts
// as unreachable there).

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "lock/history.hpp"
#include "lock/inspect.hpp"
#include "redis/connection.hpp"

namespace redlock::fleet {

using Clock = redis::Clock;

// The upper bounds of the run duration histogram, in seconds: fit for jobs of a second to a
// day. The counters hash ({<key>}:stats) has a field "d:<bound>" per bucket (and "d:+Inf"),
// each counting the runs of that bucket alone; the exporter adds them up.
inline constexpr std::array<long long, 14> k_duration_buckets = {
    1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400};

// A name's counters, kept on the servers with each history entry (lock/scripts.hpp,
// k_history_script). Over several servers each counts what it saw, and a reading keeps the
// largest of each: exact while one server saw every run, and never more than the truth.
// Any client that may write the lock's keys may write these: counts are believed from 0 to
// 2^53 (util/count.hpp) and times from 1970 to 9999 (util::plausible_ms); a field past
// belief is unknown, as if missing.
struct Counters {
    std::map<std::string, long long> runs;    // by outcome (the words of `history`)
    std::optional<long long> last_success_ms; // Unix ms, servers' clock: ran and exited 0
    std::optional<long long> last_run_ms;     // when the last run that ran PROGRAM ended
    std::optional<long long> slot_ms;         // --once-per: the slot, as its last run gave it
    // Runs per duration bucket (k_duration_buckets, then +Inf), not cumulative.
    std::array<long long, k_duration_buckets.size() + 1> durations{};
    std::optional<long long> duration_sum_ms;

    [[nodiscard]] bool empty() const {
        return runs.empty() && !last_success_ms && !last_run_ms && !slot_ms;
    }
    // Takes the larger of each.
    void merge(const Counters& other);
};

// Parses a counters hash's field/value pairs; fields it does not know are skipped.
[[nodiscard]] Counters
parse_counters(const std::vector<std::pair<std::string, std::string>>& fields);

// A name's lock as the views show it: lock::LockView merged over the servers, without what
// they do not show (each server's own view, each permit's), small enough for a model of
// 100,000 names. The holder, on the heap: most names of a fleet are free.
struct LockSummary {
    lock::LockState state = lock::LockState::unknown;
    std::optional<std::string> token;           // the majority's token when held
    long long ttl_ms = -2;                      // until fewer than a majority hold it
    std::shared_ptr<const lock::Holder> holder; // none: free, or a client without metadata
    std::optional<long long> fence;             // as lock::LockView::fence
    bool wrong_type = false; // held because a majority have a key of the wrong type
    size_t limit = 0;        // a --limit name's N (0: a plain lock)
    size_t permits_held = 0;
    std::optional<long long> slot_ms; // a --once-per name's slot, from its latest slot record
    // A `redlock cron` job's latest slot, schedule and zone; on the heap: few names are jobs.
    std::shared_ptr<const lock::CronRecord> cron;
};

// The newest run of a name's history as the views show it (lock::HistoryEntry without its
// id, fence and who caused a skip).
struct LatestRun {
    std::string outcome;
    std::string host;
    long long pid = 0;
    std::string user;
    std::string command;
    std::optional<int> exit_status;
    std::optional<long long> started_ms; // as lock::HistoryEntry's: nullopt when unknown
    std::optional<long long> waited_ms;
    std::optional<long long> held_ms;
};

// One name as the fleet sees it.
struct LockRecord {
    LockSummary view;
    long long waiters = 0; // waiting runs: on the wait list, or listening for releases
    long long queue = 0;   // --fair places
    Counters counters;
    std::optional<LatestRun> latest; // the newest run in its history

    // Nothing of the name was found on the servers that answered: no lock, no waiter, no
    // counter, no history.
    [[nodiscard]] bool gone() const;
};

struct Reading {
    std::vector<LockRecord> locks;   // one per name asked, in that order
    std::vector<std::string> errors; // per server: why it could not be read; empty if read
    bool interrupted = false;        // the interrupt fd spoke: `locks` is not to be used
};

class LockReader {
  public:
    explicit LockReader(const config::Config& config);

    [[nodiscard]] std::span<redis::Connection> connections() { return m_conns; }
    [[nodiscard]] const std::string& prefix() const { return m_prefix; }
    // A Redis Cluster node: its names are read one request at a time (a pipeline would
    // meet MOVED replies for the slots of other nodes).
    void set_cluster(size_t server, bool cluster) { m_servers[server].cluster = cluster; }

    // Reads `names` on every server. Stops early, with `interrupted`, as soon as
    // `interrupt_fd` (if >= 0) is readable.
    [[nodiscard]] Reading read(std::span<const std::string> names, int interrupt_fd = -1);

    static constexpr size_t k_batch = 500; // names per pipeline
    static constexpr auto k_stragglers = std::chrono::milliseconds(20);

  private:
    enum class Mode { evalsha_ro, evalsha, eval_ro, eval };
    struct Server {
        Mode mode = Mode::evalsha_ro;
        bool cluster = false;
    };
    [[nodiscard]] std::string command(Mode mode, const std::string& name) const;

    std::string m_prefix;
    std::vector<redis::Connection> m_conns;
    std::vector<Server> m_servers;
};

} // namespace redlock::fleet
