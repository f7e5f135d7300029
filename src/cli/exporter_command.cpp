// `redlock exporter [--listen ADDR:PORT] [-p GLOB]`: the fleet model (fleet/fleet.hpp),
// kept live by the servers' notices, served over HTTP (http/server.hpp, libmicrohttpd in
// our own poll loop) as Prometheus metrics, a page and JSON. A request finds the model at
// most k_fresh old: past that, every lock is read again first (a few milliseconds for a
// thousand names), so that what the servers changed without a notice (a lease that ran
// out, a server restarted) is never shown for long.

#include <chrono>
#include <csignal>
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

constexpr auto k_fresh = 2s;

util::UtcMillis wall_now() {
    return std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
}

} // namespace

int exporter_command(const ExporterOptions& options, const config::Config& config) {
    auto signals = process::SignalEvents::open();
    if (!signals)
        return report(signals.error());
    fleet::Fleet model(config,
                       fleet::Fleet::Options{.pattern = options.pattern, .keep_free = true});
    if (auto started = model.start(signals->fd()); !started)
        return report(started.error());

    auto fresh = [&] {
        const auto read = model.refreshed_at();
        if (!read || Clock::now() - *read > k_fresh)
            (void)model.refresh_all(signals->fd());
    };
    auto handler = [&](const http::Request& request) -> http::Response {
        const auto path = request.path;
        if (path == "/metrics") {
            fresh();
            return {200,
                    "text/plain; version=0.0.4; charset=utf-8",
                    fleet::render_metrics(model, wall_now()),
                    {}};
        }
        if (path == "/" || path == "/index.html") {
            fresh();
            return {200,
                    "text/html; charset=utf-8",
                    fleet::render_page(model, wall_now()),
                    {{"Content-Security-Policy", std::string(fleet::k_page_policy)}}};
        }
        if (path == "/api/locks") {
            fresh();
            return {200, "application/json", fleet::render_api(model, wall_now()), {}};
        }
        if (path == "/page.js")
            return {200, "text/javascript; charset=utf-8", std::string(fleet::page_script()), {}};
        if (path == "/page.css")
            return {200, "text/css; charset=utf-8", std::string(fleet::page_style()), {}};
        return {404, "text/plain; charset=utf-8", "not found: try / or /metrics\n", {}};
    };
    auto server = http::Server::start(options.listen, handler);
    if (!server)
        return report(server.error());
    log::note("serving the locks matching '{}' on http://{}/ (metrics: /metrics)", options.pattern,
              (*server)->address());

    std::vector<pollfd> fds;
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
    }
}

} // namespace redlock::cli
