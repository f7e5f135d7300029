#include "cli/run_command.hpp"

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "cli/common.hpp"
#include "cli/stderr_observer.hpp"
#include "job/run.hpp"
#include "monitor/events_observer.hpp"
#include "monitor/hook_observer.hpp"
#include "monitor/metrics_file.hpp"
#include "monitor/metrics_observer.hpp"
#include "monitor/notify_observer.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace redlock::cli {

namespace {

// systemd's notification socket, taken out of the environment (as sd_notify's
// unset_environment does) so that PROGRAM does not speak for redlock's service: systemd
// takes notifications from the main process only (NotifyAccess=main), which is redlock.
// --notify-passthrough leaves NOTIFY_SOCKET to PROGRAM, for a daemon that says READY=1
// itself (the unit then needs NotifyAccess=all). WATCHDOG_* go either way: the watchdog
// is redlock's, kept while the lease is.
std::optional<monitor::NotifyObserver> notify_observer(const RunOptions& options) {
    if (std::getenv("NOTIFY_SOCKET") == nullptr)
        return std::nullopt;
    std::string why_not;
    auto socket = monitor::NotifySocket::from_environment(why_not);
    std::string watchdog_why_not;
    const auto watchdog = monitor::NotifySocket::watchdog_interval(watchdog_why_not);
    if (socket && !watchdog_why_not.empty())
        util::log::verbose("{}", watchdog_why_not);
    if (!options.notify_passthrough)
        ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
    if (!socket) {
        util::log::verbose("{}; systemd is not told how the run goes", why_not);
        return std::nullopt;
    }
    return std::optional<monitor::NotifyObserver>(std::in_place, options.name, std::move(*socket),
                                                  watchdog, options.notify_passthrough);
}

} // namespace

int run_command(const RunOptions& options, const config::Config& config) {
    job::RunSpec spec;
    spec.name = options.name;
    spec.ttl = options.ttl;
    spec.wait = {options.wait, options.fair, options.min_validity};
    spec.program = options.program;
    spec.max_hold = options.max_hold;
    spec.min_hold = options.min_hold;
    spec.once_per = options.once_per;
    spec.limit = options.limit;
    // If redlock dies, its releaser reports the run's end there too (job/will.hpp).
    std::error_code ec;
    if (!options.metrics_file.empty())
        spec.metrics_file = std::filesystem::absolute(options.metrics_file, ec).string();
    else if (!options.metrics_dir.empty())
        spec.metrics_file = std::filesystem::absolute(
                                monitor::metrics_file_in(options.metrics_dir, options.name), ec)
                                .string();
    if (options.events && !options.events->starts_with("fd:"))
        spec.events_file = std::filesystem::absolute(*options.events, ec).string();
    StderrObserver stderr_observer(options.name);

    // Nothing but stderr asked for (most runs): no fan-out, nothing else set up.
    auto notify = notify_observer(options);
    const bool monitored = notify || !options.metrics_file.empty() ||
                           !options.metrics_dir.empty() || options.events ||
                           !options.on_lost.empty();
    if (!monitored)
        return exit_status(job::run(spec, config, stderr_observer), options.conflict_exit_code);

    job::Observers observers;
    observers.add(stderr_observer);
    std::unique_ptr<monitor::EventsObserver> events;
    if (options.events) {
        auto opened = monitor::EventsObserver::open(*options.events, options.name,
                                                    job::known_secrets(config));
        // A mistaken fd:N is a usage error; a file that cannot be opened, like every
        // monitoring failure, is said and the job runs all the same.
        if (!opened && opened.error().kind == util::ErrorKind::usage)
            return report(opened.error());
        if (!opened)
            util::log::note("{}; running without --events", opened.error().message);
        else
            events = std::move(*opened);
        if (events)
            observers.add(*events);
    }
    std::optional<monitor::MetricsObserver> metrics;
    if (!options.metrics_file.empty())
        metrics.emplace(options.name, options.metrics_file);
    else if (!options.metrics_dir.empty())
        metrics.emplace(options.name, monitor::metrics_file_in(options.metrics_dir, options.name));
    if (metrics)
        observers.add(*metrics);
    if (notify)
        observers.add(*notify);
    std::optional<monitor::HookObserver> hook;
    if (!options.on_lost.empty()) {
        hook.emplace(options.name, options.on_lost, options.hook_timeout,
                     job::known_secrets(config));
        observers.add(*hook);
    }

    const auto result = job::run(spec, config, observers);
    const int status = exit_status(result, options.conflict_exit_code);
    // Written after the release: none of it can delay the lock's hand-over.
    if (metrics)
        metrics->finish(result, status);
    if (notify)
        notify->finish(result, status);
    if (events)
        events->finish(result, status);
    if (hook)
        hook->finish();
    return status;
}

} // namespace redlock::cli
