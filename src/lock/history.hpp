#pragma once
// A name's history: one entry per run that reached a decision (it ran, lost its lease, was
// stopped, was refused, gave up waiting...), kept on the lock servers themselves, beside the
// lock in its hash slot (lock/keys.hpp: in the name's record, capped by count and age).
// A run writes its entry in the same write as the request that decided it (the release, an
// extend of --min-hold, or its last attempt when refused: lock/scripts.hpp,
// k_history_script), so recording costs no round trip; a write that fails changes nothing
// of the run. Over several servers, each has the entries written where it answered; a
// reading merges them by run, so that servers down when a run wrote, or when reading, lose
// nothing a majority has.

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lock/keys.hpp"
#include "redis/connection.hpp"
#include "util/error.hpp"

namespace redlock::lock {

// What a run sends to be recorded.
struct HistoryRecord {
    // A refusal: recorded only where the lock is held by another owner (see
    // k_history_script), with that holder as `by`. Else always recorded.
    bool skip = false;
    size_t keep = 300;                               // entries kept per name
    std::chrono::milliseconds max_age{24 * 3600000}; // and for how long
    std::chrono::milliseconds waited{};
    std::chrono::milliseconds held{};
    // When the run ended: what the entry and the counters say, however late a server gets
    // it (sent as this host's wall-clock time, bounded by the server's TIME); nullopt: when
    // it arrives.
    std::optional<redis::Clock::time_point> ended;
    // A `redlock cron` slot's run: the record is kept until then at least (ms since the
    // Unix epoch; lock/cron_scripts.hpp), however short the history's age.
    std::optional<long long> keep_until_ms;
    // Field/value pairs: run, host, pid, user, command, outcome, and as they apply status,
    // fence, by_host, by_pid, by_user, note; each one ended by a NUL, as the history script takes
    // them (one argument for all: this goes with every release).
    std::string fields;
    void add(std::string_view field, std::string_view value) {
        fields.append(field).push_back('\0');
        fields.append(value).push_back('\0');
    }
};

// One run as read back.
struct HistoryEntry {
    std::string run; // the run's id: the same on every server it was written to
    // Times as the servers or another client wrote them: nullopt when missing or past
    // belief (util::plausible_ms), shown as unknown.
    std::optional<long long> started_ms;
    std::string host;
    long long pid = 0;
    std::string user;
    std::string command;
    std::string outcome;
    std::optional<int> exit_status;
    std::optional<long long> waited_ms;
    std::optional<long long> held_ms;
    std::optional<long long> fence;
    // Who caused a skip or a force release, when known.
    std::optional<std::string> by_host;
    std::optional<long long> by_pid;
    std::optional<std::string> by_user;
    // Said of a run whose lock kept its TTL when it was killed: why.
    std::optional<std::string> note;
    // A `redlock cron` slot's entry: the slot's instant (Unix ms).
    std::optional<long long> slot_ms;
};

struct HistoryRead {
    std::vector<HistoryEntry> runs; // newest first, one per run
    size_t answered = 0;            // servers read
    // Entries passed over, on all the servers read: larger than k_max_history_entry, or
    // not a run's (another client's).
    size_t skipped = 0;
    // Servers that could not be read, or whose history key is not one ("server: why").
    std::vector<std::string> failures;
    bool auth_error = false; // some server refused our credentials or permissions
};

// The history script's call (EVAL, as it goes behind another request) recording `record`
// for the name whose keys are `keys`; `token` is the attempt's (a skip is recorded only
// where another token holds the lock). Empty when nothing is kept (history = 0: no entry,
// no counters).
[[nodiscard]] std::string history_command(const Keys& keys, const std::string& token,
                                          const HistoryRecord& record);

// An entry larger than this (k_history_page_script's cost: 96 + 32 a field or value +
// their bytes) is another client's: a run's is a few hundred bytes, its command clipped
// at 1 KB. It is passed over, unread.
inline constexpr size_t k_max_history_entry = size_t{64} << 10;
// What one page of the history may cost: with k_max_history_entry, no reply passes the
// reader's bounds (redis/reader.hpp: elements and bytes).
inline constexpr size_t k_max_history_page = size_t{1} << 20;
inline constexpr size_t k_history_page_entries = 1000;

// The last `count` runs of the name whose keys are `keys`, read from every server (each up
// to its timeouts, in pages of at most k_history_page_entries, until `count` runs or the
// end) and merged by run.
[[nodiscard]] HistoryRead read_history(std::span<redis::Connection> conns, const Keys& keys,
                                       size_t count);

// Parses one stream entry's field/value pairs; nullopt when it is not a run's entry.
[[nodiscard]] std::optional<HistoryEntry>
parse_history_entry(const std::vector<std::pair<std::string, std::string>>& fields);

} // namespace redlock::lock
