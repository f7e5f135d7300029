#pragma once
// The metrics file of `run --metrics` in the Prometheus text exposition format (0.0.4), as
// node_exporter's textfile collector reads it: per lock name, the last run (start, end,
// duration, wait, hold, exit status, outcome), how many of its runs are running PROGRAM on
// this host, and counters of runs by outcome that go on counting across runs. The file
// is redlock's own: it is read back, changed for one name and written whole, so several
// names can share one file and counters survive. What it does not understand it drops.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace redlock::monitor {

// A label value as the exposition format wants it between double quotes: backslash,
// double quote and line feed escaped (\\, \", \n); every other byte as it is.
[[nodiscard]] std::string escape_label_value(std::string_view value);
// The reverse, for a file read back; nullopt for a dangling or unknown escape, or a value
// that is not UTF-8 (the format wants it; another writer of a shared file may not have
// cared, and its sample is then dropped rather than carried into every rewrite).
[[nodiscard]] std::optional<std::string> unescape_label_value(std::string_view escaped);

// A run of NAME that is running PROGRAM on this host: its redlock process, told apart from
// a later process with the same pid by its identity (process/identity.hpp), and from a
// process of another pid namespace (a container sharing the metrics directory) with the
// same pid by that namespace (the inode of /proc/self/ns/pid; 0: not recorded, before 0.4).
struct RunningRun {
    long pid = 0;
    std::string identity;
    double since = 0; // Unix time, seconds
    unsigned long long pid_ns = 0;
    bool operator==(const RunningRun&) const = default;
};

// The last finished run of a name.
struct LastRun {
    double start = 0;    // Unix time, seconds
    double end = 0;      // Unix time, seconds
    double wait = 0;     // seconds waiting for the lock (until acquired, or until it gave up)
    double held = 0;     // seconds holding it (0 when not acquired)
    int exit_status = 0; // redlock's exit status
    std::string outcome; // job::outcome_name()
    bool operator==(const LastRun&) const = default;
};

struct NameMetrics {
    std::optional<LastRun> last;
    std::map<std::string, long long> runs_total; // by outcome
    std::vector<RunningRun> running;
    bool operator==(const NameMetrics&) const = default;
};

// Every name in one file.
using MetricsFile = std::map<std::string, NameMetrics>;

// Reads a file this module wrote; lines it does not know are dropped.
[[nodiscard]] MetricsFile parse_metrics(std::string_view text);
// The file's text: HELP and TYPE per family, then its samples, names in order. Every word
// of `outcomes` gets a sample per name, 0 when it never happened: a counter that exists
// from the start lets rate() and increase() see its first run, and alerts on the last
// outcome need not test for absence.
[[nodiscard]] std::string render_metrics(const MetricsFile& file,
                                         const std::vector<std::string>& outcomes);

} // namespace redlock::monitor
