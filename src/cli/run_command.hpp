#pragma once
// `redlock run`: acquire, run PROGRAM while renewing the lease, stop PROGRAM if the lease is
// lost, release, and exit with PROGRAM's status.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace redlock::cli {

struct RunOptions {
    std::string name; // the lock's name (validated)
    std::chrono::milliseconds ttl{30000};
    std::optional<std::chrono::milliseconds> wait; // nullopt: wait until acquired
    int conflict_exit_code = 75;
    std::vector<std::string> program; // PROGRAM and its arguments
    bool fair = false;                // first come, first served among --fair waiters
    // --max-hold: PROGRAM is stopped once it has run this long, and run exits 124.
    std::optional<std::chrono::milliseconds> max_hold;
    // --min-validity: PROGRAM starts only with at least this much of the lease left.
    std::optional<std::chrono::milliseconds> min_validity;
    // --min-hold: the lock stays held at least this long after acquiring.
    std::optional<std::chrono::milliseconds> min_hold;
    // --once-per: at most one run of NAME per slot of this length, on the servers' clock.
    std::optional<std::chrono::milliseconds> once_per;
    size_t limit = 1; // --limit: holders at once (a semaphore above 1)
    // Monitoring (docs/monitoring.md): where the metrics go (a file, or a file per name in a
    // directory; empty for none), the --events target, the --on-lost command (empty: none)
    // and its time bound, and whether PROGRAM gets $NOTIFY_SOCKET.
    std::string metrics_file;
    std::string metrics_dir;
    std::optional<std::string> events;
    std::string on_lost;
    std::chrono::milliseconds hook_timeout{10000};
    bool notify_passthrough = false;
};

// Returns the exit status of the whole command.
[[nodiscard]] int run_command(const RunOptions& options, const config::Config& config);

// `redlock __release-dead-run` (process::k_release_command): the releaser of a run whose
// redlock died, its will on stdin (cli/dead_run_command.cpp).
[[nodiscard]] int dead_run_command();

} // namespace redlock::cli
