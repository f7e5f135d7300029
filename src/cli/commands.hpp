#pragma once
// The inspection and scripting commands: status, list, history, watch, exporter, acquire,
// extend, release, doctor, and cron --check.
// Each returns the command's exit status; human output goes to stdout, --json prints one
// JSON document instead.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "cron/zone.hpp"

namespace redlock::cli {

struct StatusOptions {
    std::vector<std::string> names;
    bool json = false;
};
[[nodiscard]] int status_command(const StatusOptions& options, const config::Config& config);

struct HistoryOptions {
    std::string name;
    size_t count = 20;                              // -n: the newest N runs
    std::optional<std::chrono::milliseconds> since; // --since: started at most this long ago
    bool json = false;
};
[[nodiscard]] int history_command(const HistoryOptions& options, const config::Config& config);

struct WatchOptions {
    std::string pattern = "*";
    bool json = false;
};
[[nodiscard]] int watch_command(const WatchOptions& options, const config::Config& config);

// The exporter's address when --listen is not given: loopback only, on a port that no
// exporter on the Prometheus wiki's list of default ports uses (its 9100-9999 range is full).
inline constexpr std::string_view k_exporter_listen = "127.0.0.1:21379";

struct ExporterOptions {
    std::string listen{k_exporter_listen};
    std::string pattern = "*";
};
[[nodiscard]] int exporter_command(const ExporterOptions& options, const config::Config& config);

struct ListOptions {
    std::string pattern = "*";
    bool json = false;
};
[[nodiscard]] int list_command(const ListOptions& options, const config::Config& config);

struct ReapOptions {
    std::string pattern = "*";
    bool dry_run = false;
    bool json = false;
};
[[nodiscard]] int reap_command(const ReapOptions& options, const config::Config& config);

struct AcquireOptions {
    std::string name;
    std::chrono::milliseconds ttl{30000};
    std::optional<std::chrono::milliseconds> wait;
    int conflict_exit_code = 75;
    bool json = false;
    bool shell = false; // print REDLOCK_KEY, REDLOCK_TOKEN and REDLOCK_FENCE for eval
    bool fair = false;  // first come, first served among --fair waiters
};
[[nodiscard]] int acquire_command(const AcquireOptions& options, const config::Config& config);

struct ExtendOptions {
    std::string name;
    std::string token;
    std::chrono::milliseconds ttl{30000};
};
[[nodiscard]] int extend_command(const ExtendOptions& options, const config::Config& config);

struct ReleaseOptions {
    std::string name;
    std::string token; // empty with --force
    bool force = false;
    bool yes = false;
};
[[nodiscard]] int release_command(const ReleaseOptions& options, const config::Config& config);

struct DoctorOptions {
    bool json = false;
};
[[nodiscard]] int doctor_command(const DoctorOptions& options, const config::Config& config);

// `cron --check FILE`: needs no config, no server.
struct CronOptions {
    std::string file;
    size_t count = 3;                  // -n: the next N fires of each job
    std::optional<cron::Instant> from; // --from: fires after this instead of now
    bool json = false;
};
[[nodiscard]] int cron_command(const CronOptions& options);

// `cron FILE`: the daemon (cron/daemon.hpp).
struct CronDaemonOptions {
    std::string file;
    bool json = false;
    std::optional<std::chrono::milliseconds> grace;
    int verbosity = 1;
};
[[nodiscard]] int cron_daemon_command(const CronDaemonOptions& options,
                                      const config::Config& config);

// `redlock __cron-slot JOB SLOT`: the run of one slot, its job::SlotRun on stdin.
[[nodiscard]] int cron_slot_command();

} // namespace redlock::cli
