#pragma once
// Where `run --metrics` writes, and how: the file is read, changed and replaced whole
// under a lock of this host (flock on a lock file beside it), so that two runs at once
// lose no count; the new text goes to a temporary file in the same directory, renamed
// over the old one, so that node_exporter never reads half a file. No fsync: metrics are
// not worth a disk flush on every run, and a rename over a file is flushed with it by
// ext4 and xfs anyway.

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "monitor/prometheus.hpp"
#include "util/error.hpp"

namespace redlock::monitor {

// The file of lock `name` in a metrics directory: "redlock_<name>.prom", every byte of the
// name but A-Z a-z 0-9 . _ - written as %XX, so that "ci/deploy" is one file
// (redlock_ci%2Fdeploy.prom) and two names never share one.
[[nodiscard]] std::filesystem::path metrics_file_in(const std::filesystem::path& dir,
                                                    std::string_view name);

// Reads `file` (a missing one is empty), lets `change` edit it, and replaces it
// atomically, all under the lock file ".<file name>.lock" in the same directory. Waits at
// most `lock_wait` for that lock. Fails, leaving no temporary file behind, when the
// directory is missing, read-only or full.
[[nodiscard]] util::Expected<void>
update_metrics_file(const std::filesystem::path& file,
                    const std::function<void(MetricsFile&)>& change,
                    std::chrono::milliseconds lock_wait = std::chrono::milliseconds(2000));

} // namespace redlock::monitor
