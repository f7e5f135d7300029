#pragma once
// Pieces shared by the commands: reporting an error as message + exit status, the
// acquisition loop with --wait, and human-readable durations for output.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "lock/holder.hpp"
#include "lock/lock.hpp"
#include "process/signals.hpp"
#include "util/error.hpp"

namespace redlock::cli {

// Prints "redlock: message" and returns the error kind's exit status.
int report(const util::Error& error);

// -v shows every release; a release that did not reach a server is worth a note without
// -v: the next holder there must wait for the TTL. Servers left behind once a majority
// answered are not: their release was sent, or is being finished in the background.
void note_release(std::string_view name, const std::vector<lock::ServerResult>& results);

enum class AcquireOutcome { acquired, conflict, interrupted };

struct Acquisition {
    AcquireOutcome outcome = AcquireOutcome::conflict;
    int signal = 0; // the signal that interrupted waiting
};

// Tries to acquire, retrying with a jittered delay while the lock is held by another owner
// until `wait` runs out (nullopt: forever; 0: a single attempt). Servers that cannot be
// reached are never waited on: that is an error at once. A forwarded signal interrupts.
// With `min_validity`, an acquisition that leaves less than that of the lease is released
// and counts as not acquired.
[[nodiscard]] util::Expected<Acquisition>
acquire_waiting(lock::Lock& lock, std::string_view name,
                std::optional<std::chrono::milliseconds> wait, process::SignalEvents& signals,
                bool fair = false, std::optional<std::chrono::milliseconds> min_validity = {});

// The exit status when acquisition did not end with the lock: the error's, 128+N for an
// interrupting signal, or `conflict_exit_code`. nullopt when the lock was acquired.
[[nodiscard]] std::optional<int> unless_acquired(const util::Expected<Acquisition>& acquisition,
                                                 int conflict_exit_code);

// The lock NAME under the config's key prefix, with its metadata key.
[[nodiscard]] lock::Lock make_lock(const config::Config& config, const std::string& name,
                                   std::string token, std::chrono::milliseconds ttl,
                                   std::vector<std::string> holder = {});

// The passwords redlock knows of (its servers', and redis-cli's REDISCLI_AUTH), to be
// masked wherever they would be stored or shown.
[[nodiscard]] std::vector<std::string> known_secrets(const config::Config& config);

// Writes command output to stdout (which belongs to the commands' output, not to messages).
// Returns false, after saying why on stderr, when it could not be written: a full disk, a
// closed pipe, or a stdout that was closed when redlock started (EBADF, although it is
// /dev/null by now). The caller then exits 70.
[[nodiscard]] bool print_stdout(const std::string& text);

// "24.3s", "5m 3s", "2h 10m", "1d 2h": a duration for people.
[[nodiscard]] std::string human_duration(std::chrono::milliseconds d);

// How long ago an ISO 8601 UTC timestamp ("2026-12-02T14:16:33.620Z") was; nullopt when
// the text is not one (metadata is whatever a client wrote).
[[nodiscard]] std::optional<std::chrono::milliseconds> age_of(const std::string& iso);

// "user@host (pid N)", escaped for a terminal, or "an unknown owner (...)".
[[nodiscard]] std::string holder_text(const std::optional<lock::Holder>& holder);

} // namespace redlock::cli
