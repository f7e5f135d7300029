#pragma once
// A run's will: what must be done for it if its redlock dies (SIGKILL, the OOM killer, a
// crash) while it acquires or holds the lock. The run writes it, before its first attempt,
// into an anonymous file in memory (memfd) that only redlock, its watchdog and the
// releaser the watchdog becomes hold (process/watchdog.hpp): never argv or the
// environment, which `ps` and /proc show. It holds the run's server settings (TLS, AUTH,
// Sentinel: the config as loaded, passwords included), its lock, the token of the attempt
// in flight (updated before each attempt goes out), its place in the wait list or --fair
// queue, the fence and when it was acquired, how and when it ended once redlock knows, and its
// history, metrics and --events FILE destinations. The releaser reads it back
// (read_will) and releases as redlock would have (job/dead_run.hpp).
//
// Layout: the run's state (WillState) at offset 0, rewritten whole by one pwrite at each
// change (within one page, so that a SIGKILL cannot tear it); the watchdog's verdict on
// PROGRAM's tree at process::k_tree_report_offset; what never changes from k_body_offset,
// length first. Read only by the same binary on the same machine.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "config/config.hpp"
#include "job/events.hpp"
#include "lock/holder.hpp"
#include "lock/lock.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"

namespace redlock::job {

// Where the run is.
enum class Phase : std::int32_t {
    acquiring = 1, // attempts under way: the attempt's token may be on the servers
    holding = 2,   // acquired: PROGRAM runs (or is about to)
    ended = 3,     // PROGRAM's tree is gone and the outcome known: releasing
};

// What a will says besides the state: the run as it started.
struct WillBody {
    config::Config config; // key_prefix, history settings and servers
    std::string name;
    Millis ttl{0};
    size_t limit = 0;   // --limit N (0: a plain lock)
    std::string waiter; // its id on the wait list and the --fair queue
    std::optional<Millis> once_per;
    std::optional<Millis> min_hold;
    std::optional<long long> cron_slot_ms;       // a cron slot's run: its slot (job/cron_slot.hpp)
    std::optional<long long> cron_keep_until_ms; // and until when its slot record is needed
    // Its history entry: the run's id, and who ran what.
    std::string run;
    std::string host;
    long pid = 0; // redlock's
    std::string user;
    std::string command;
    Clock::time_point started{}; // CLOCK_BOOTTIME: the same in every process
    std::chrono::system_clock::time_point started_wall{};
    // Where the run's end is reported besides the history: its metrics file and its
    // --events FILE (absolute; empty for none: an --events fd:N died with redlock).
    std::string metrics_file;
    std::string events_file;
};

// The state, as read back.
struct WillState {
    Phase phase = Phase::acquiring;
    std::string token;
    size_t permit = 0;               // --limit: the attempt's permit
    std::optional<long long> ticket; // --fair
    bool listed = false;             // on the wait list or the --fair queue
    long long fence = 0;             // holding
    std::optional<Clock::time_point> acquired;
    std::optional<Outcome> outcome;         // ended
    std::optional<int> status;              // ended: PROGRAM's, when it ran
    std::optional<Clock::time_point> ended; // ended: when
};

// The watchdog's verdict on PROGRAM's tree (process::TreeReport).
struct TreeVerdict {
    bool proven = false; // gone, or never started
    std::string why;
};

struct WillContents {
    WillBody body;
    WillState state;
    std::optional<TreeVerdict> tree; // nullopt: no verdict written
};

class Will {
  public:
    // Writes the will of a run about to acquire with `lock`; nullopt (said with -v) where
    // no memfd can be made: the run then goes on without, as redlock before 0.4 did (a
    // killed run's lock waits for its TTL).
    [[nodiscard]] static std::optional<Will> create(const WillBody& body, const lock::Lock& lock);

    [[nodiscard]] int fd() const { return m_fd.get(); }
    // Before an attempt goes out: its token and permit, and the place in line.
    void attempt(const lock::Lock& lock);
    // Acquired at `at`.
    void acquired(const lock::Lock& lock, Clock::time_point at);
    // PROGRAM's tree is gone: the run ended so, at `at` (status: PROGRAM's, when it ran).
    void ended(Outcome outcome, std::optional<int> status, Clock::time_point at);

  private:
    Will() = default;
    void write_state();

    util::UniqueFd m_fd;
    WillState m_state;
};

// Reads a will from `fd` (the releaser's stdin). An error (usage) when it is not one: the
// releaser acts on nothing else.
[[nodiscard]] util::Expected<WillContents> read_will(int fd);

} // namespace redlock::job
