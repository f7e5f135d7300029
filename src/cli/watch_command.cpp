// `redlock watch [-p GLOB]`: a live view of the locks matching GLOB, one view of the fleet
// model (fleet/fleet.hpp: the locks, read again when their channels speak or their lease
// could have run out, each event told once). On a terminal, redrawn in the alternate screen
// (left as it was on exit); otherwise a JSON line per change.

#include <algorithm>
#include <chrono>
#include <csignal>
#include <deque>
#include <map>
#include <poll.h>
#include <unistd.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "fleet/fleet.hpp"
#include "lock/inspect.hpp"
#include "process/signals.hpp"
#include "util/clock.hpp"
#include "util/format.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/text.hpp"
#include "util/timestamp.hpp"

namespace redlock::cli {

namespace {

using Millis = std::chrono::milliseconds;
using Clock = util::BootClock;
using namespace std::chrono_literals;
namespace log = util::log;

std::string now_iso() {
    return util::format_utc_timestamp(std::chrono::floor<Millis>(std::chrono::system_clock::now()));
}

class Watch : public fleet::Listener {
  public:
    Watch(const WatchOptions& options, const config::Config& config)
        : m_options(options), m_config(config),
          m_terminal(!options.json && ::isatty(STDOUT_FILENO) == 1), m_json(!m_terminal),
          m_fleet(config, fleet::Fleet::Options{.pattern = options.pattern}, this) {}

    int run() {
        auto signals = process::SignalEvents::open();
        if (!signals)
            return report(signals.error());
        if (auto started = m_fleet.start(signals->fd()); !started)
            return report(started.error());
        if (m_terminal)
            write("\x1b[?1049h\x1b[?25l"); // the alternate screen, no cursor
        draw();
        std::vector<pollfd> fds;
        for (;;) {
            fds.assign(1, pollfd{signals->fd(), POLLIN, 0});
            m_fleet.add_pollfds(fds);
            auto now = Clock::now();
            auto wake = m_fleet.next_wake(now);
            if (m_terminal)
                wake = std::min(wake, now + 1s);
            int rc = ::poll(fds.data(), fds.size(), util::poll_timeout_ms(now, wake));
            if (rc > 0 && fds[0].revents)
                for (int sig : signals->read_pending())
                    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)
                        return finish();
            bool changed =
                m_fleet.step(std::span<const pollfd>(fds).subspan(1, rc > 0 ? fds.size() - 1 : 0),
                             signals->fd());
            if (m_fleet.sweeping())
                changed |= m_fleet.sweep(signals->fd());
            if (changed || m_terminal)
                draw();
        }
    }

    void told(const std::string& name, const fleet::LockRecord& record,
              const std::string& event) override {
        const bool held = record.view.state != lock::LockState::free;
        m_events.push_front(util::format("{}  {}: {}{}", now_iso().substr(11, 12), name, event,
                                         held && record.view.holder
                                             ? " (held by " + holder_text(*record.view.holder) + ")"
                                             : std::string()));
        if (m_events.size() > 8)
            m_events.pop_back();
        if (m_json)
            json_line(name, record, event);
    }

    void changed(const std::string& name, const fleet::LockRecord& record) override {
        if (m_json)
            json_line(name, record, "watching");
    }

  private:
    void json_line(const std::string& name, const fleet::LockRecord& w, const std::string& event) {
        util::JsonWriter json;
        json.begin_object()
            .field("at", now_iso())
            .field("event", event)
            .field("name", name)
            .field("state", lock::state_name(w.view.state));
        json.key("ttl_ms");
        if (w.view.state == lock::LockState::held)
            json.value(w.view.ttl_ms);
        else
            json.null();
        json.field("fence", w.view.fence);
        json.key("holder");
        if (w.view.holder)
            json.begin_object()
                .field("host", w.view.holder->host)
                .field("pid", w.view.holder->pid)
                .field("user", w.view.holder->user)
                .field("command", w.view.holder->command)
                .field("acquired_at", w.view.holder->acquired_at)
                .end_object();
        else
            json.null();
        json.field("waiters", w.waiters).field("queue", w.queue);
        json.key("limit");
        if (w.view.limit > 0)
            json.value(w.view.limit);
        else
            json.null();
        json.field("permits_held", w.view.permits_held);
        json.end_object();
        (void)print_stdout(json.str());
    }

    void draw() {
        if (!m_terminal)
            return;
        std::string out = "\x1b[H\x1b[2J";
        out += util::format("redlock watch {} (locks matching '{}', {})   Ctrl-C to quit\n\n",
                            now_iso().substr(0, 19) + "Z", util::printable(m_options.pattern),
                            m_config.servers.size() == 1
                                ? std::string("1 server")
                                : util::format("{} servers", m_config.servers.size()));
        out += util::format("{:<24} {:<8} {:<26} {:>8} {:>8} {:>6} {:>8}\n", "NAME", "STATE",
                            "HOLDER", "HELD", "TTL", "FENCE", "WAITING");
        if (m_fleet.locks().empty())
            out += "(no lock is held)\n";
        for (const auto& [name, entry] : m_fleet.locks()) {
            const auto& w = entry.record;
            const auto& v = w.view;
            std::string holder =
                v.limit > 0 ? util::format("{} of {} permits", v.permits_held, v.limit)
                : v.holder ? util::format("{}@{}:{}", v.holder->user, v.holder->host, v.holder->pid)
                           : std::string(v.state == lock::LockState::held ? "unknown" : "-");
            std::optional<Millis> age;
            if (v.holder)
                age = age_of(v.holder->acquired_at);
            const auto left =
                Millis(v.ttl_ms) - std::chrono::floor<Millis>(Clock::now() - entry.read_at);
            out += util::format(
                "{:<24} {:<8} {:<26} {:>8} {:>8} {:>6} {:>8}\n",
                util::clip(util::printable(name), 24), lock::state_name(v.state),
                util::clip(util::printable(holder), 26), age ? human_duration(*age) : "-",
                v.state == lock::LockState::held && v.ttl_ms >= 0
                    ? human_duration(std::max(left, Millis(0)))
                    : "-",
                v.fence ? std::to_string(*v.fence) : "-",
                w.queue > 0 ? util::format("{} fair", w.queue) : std::to_string(w.waiters));
            if (v.holder)
                out += util::format("  {}\n", util::clip(util::printable(v.holder->command), 100));
        }
        if (!m_events.empty()) {
            out += "\nRecent events\n";
            for (const auto& e : m_events)
                out += "  " + util::printable(e) + "\n";
        }
        write(out);
    }

    static void write(std::string_view text) {
        while (!text.empty()) {
            const ssize_t n = ::write(STDOUT_FILENO, text.data(), text.size());
            if (n <= 0)
                return;
            text.remove_prefix(static_cast<size_t>(n));
        }
    }

    int finish() {
        if (m_terminal)
            write("\x1b[?25h\x1b[?1049l"); // the cursor, and the screen as it was
        return 0;
    }

    const WatchOptions& m_options;
    const config::Config& m_config;
    bool m_terminal;
    bool m_json; // a JSON line per change: asked for, or stdout is no terminal
    fleet::Fleet m_fleet;
    std::deque<std::string> m_events; // the last few told, newest first
};

} // namespace

int watch_command(const WatchOptions& options, const config::Config& config) {
    return Watch(options, config).run();
}

} // namespace redlock::cli
