// `redlock exporter [--listen ADDR:PORT] [-p GLOB]`: the fleet model (fleet/fleet.hpp),
// kept live by the servers' notices and swept now and then for what changes without one,
// served over HTTP (http/server.hpp, libmicrohttpd in our own poll loop) as Prometheus
// metrics, a page and JSON. A request is answered from the model as it is, never after a
// reading of every lock (a hundred thousand names take seconds): HTTP goes first, and a
// sweep's batch is read while no response is being written, or every k_sweep_gap at least.

#include <chrono>
#include <csignal>
#include <memory>
#include <poll.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "fleet/fleet.hpp"
#include "fleet/metrics.hpp"
#include "fleet/page.hpp"
#include "http/server.hpp"
#include "process/signals.hpp"
#include "util/clock.hpp"
#include "util/log.hpp"

namespace redlock::cli {

namespace {

using namespace std::chrono_literals;
using Clock = util::BootClock;
namespace log = util::log;

constexpr auto k_sweep_gap = 200ms;

util::UtcMillis wall_now() {
    return std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
}

} // namespace

int exporter_command(const ExporterOptions& options, const config::Config& config) {
    auto signals = process::SignalEvents::open();
    if (!signals)
        return report(signals.error());
    fleet::Fleet model(config, fleet::Fleet::Options{
                                   .pattern = options.pattern, .keep_free = true, .sweep = true});
    if (auto started = model.start(signals->fd()); !started)
        return report(started.error());

    auto handler = [&](const http::Request& request) -> http::Response {
        const auto path = request.path;
        if (path == "/metrics") {
            // Written as Prometheus reads it: never held whole.
            auto writer = std::make_shared<fleet::MetricsWriter>(model, wall_now());
            http::Response metrics{200, "text/plain; version=0.0.4; charset=utf-8", {}, {}, {}};
            metrics.writer = [writer](std::string& out, size_t want) {
                return writer->next(out, want);
            };
            return metrics;
        }
        if (path == "/" || path == "/index.html") {
            return {200,
                    "text/html; charset=utf-8",
                    fleet::render_page(model, wall_now()),
                    {{"Content-Security-Policy", std::string(fleet::k_page_policy)}},
                    {}};
        }
        if (path == "/api/locks")
            return {200, "application/json", fleet::render_api(model, wall_now()), {}, {}};
        if (path == "/page.js")
            return {
                200, "text/javascript; charset=utf-8", std::string(fleet::page_script()), {}, {}};
        if (path == "/page.css")
            return {200, "text/css; charset=utf-8", std::string(fleet::page_style()), {}, {}};
        return {404, "text/plain; charset=utf-8", "not found: try / or /metrics\n", {}, {}};
    };
    auto server = http::Server::start(options.listen, handler);
    if (!server)
        return report(server.error());
    log::note("serving the locks matching '{}' on http://{}/ (metrics: /metrics)", options.pattern,
              (*server)->address());

    std::vector<pollfd> fds;
    auto swept_at = Clock::now();
    for (;;) {
        fds.assign({pollfd{signals->fd(), POLLIN, 0}, pollfd{(*server)->fd(), POLLIN, 0}});
        model.add_pollfds(fds);
        auto now = Clock::now();
        auto wake = model.next_wake(now);
        if (auto d = (*server)->deadline())
            wake = std::min(wake, *d);
        const int rc = ::poll(fds.data(), fds.size(), util::poll_timeout_ms(now, wake));
        if (rc > 0 && fds[0].revents)
            for (int sig : signals->read_pending())
                if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)
                    return 0;
        (void)model.step(std::span<const pollfd>(fds).subspan(2, rc > 0 ? fds.size() - 2 : 0),
                         signals->fd());
        (*server)->run();
        if (model.sweeping() && (!(*server)->busy() || Clock::now() - swept_at >= k_sweep_gap)) {
            (void)model.sweep(signals->fd());
            swept_at = Clock::now();
        }
    }
}

} // namespace redlock::cli
