// `redlock __release-dead-run`: the releaser of a run whose redlock died
// (job/dead_run.hpp), which the run's watchdog becomes once PROGRAM's tree is gone, the
// run's will on stdin (job/will.hpp). Hidden from help, and harmless by hand: it reads no
// config and acts only on a will. Nobody reads its stdout and stderr (/dev/null): what an
// operator must know goes to the history, the metrics file, the --events FILE and the
// system log.

#include <memory>
#include <optional>
#include <syslog.h>
#include <unistd.h>

#include "cli/common.hpp"
#include "cli/run_command.hpp"
#include "job/acquire.hpp"
#include "job/dead_run.hpp"
#include "job/will.hpp"
#include "monitor/events_observer.hpp"
#include "monitor/metrics_observer.hpp"

namespace redlock::cli {

int dead_run_command() {
    auto will = job::read_will(STDIN_FILENO);
    if (!will)
        return report(will.error());
    const auto& body = will->body;
    job::Observers observers;
    std::unique_ptr<monitor::EventsObserver> events;
    if (!body.events_file.empty()) {
        if (auto opened = monitor::EventsObserver::open(body.events_file, body.name,
                                                        job::known_secrets(body.config))) {
            events = std::move(*opened);
            events->speak_for(body.pid);
            observers.add(*events);
        }
    }
    std::optional<monitor::MetricsObserver> metrics;
    if (!body.metrics_file.empty()) {
        metrics.emplace(body.name, body.metrics_file);
        metrics->started_at(body.started_wall, body.started, will->state.acquired);
        observers.add(*metrics);
    }
    const auto dead = job::release_dead_run(*will, observers);
    const int status = exit_status(dead.result, util::exit_code::conflict);
    if (metrics)
        metrics->finish(dead.result, status);
    if (events)
        events->finish(dead.result, status);
    // The system log (the journal) hears of it: there is no terminal left to tell.
    ::openlog("redlock", LOG_PID, LOG_USER);
    if (dead.note)
        ::syslog(LOG_WARNING, "%s", dead.note->c_str());
    else if (will->state.phase != job::Phase::acquiring)
        ::syslog(LOG_NOTICE, "'%s': released: its run's redlock (pid %ld) died", body.name.c_str(),
                 body.pid);
    ::closelog();
    return 0;
}

} // namespace redlock::cli
