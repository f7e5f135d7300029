// `redlock watch [-p GLOB]`: a live view of the locks matching GLOB, driven by the servers'
// notices (a pattern subscription to the locks' release and events channels): a lock is
// read again when one of its channels speaks, and when its lease could have run out (a
// holder that died says nothing), never on a timer that reads every lock. On a terminal,
// redrawn in the alternate screen (left as it was on exit); otherwise a JSON line per
// change.

#include <algorithm>
#include <chrono>
#include <csignal>
#include <deque>
#include <map>
#include <poll.h>
#include <unistd.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "lock/inspect.hpp"
#include "lock/keys.hpp"
#include "process/signals.hpp"
#include "redis/fanout.hpp"
#include "redis/subscription.hpp"
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

struct Watched {
    lock::LockView view;
    long long waiters = 0; // waiting runs: on the wait list, or listening for releases
    long long queue = 0;   // --fair places
    Clock::time_point read_at{};
};

// Every server announces what happens to a lock on it, and not always at once: what one
// server says is news only if no other said it already. The events told, latest last, and
// how far each server's own announcements have caught up with them.
class Told {
  public:
    std::optional<std::string> news(size_t server, std::string event) {
        size_t& cursor = m_cursor[server];
        for (size_t i = cursor; i < m_events.size(); ++i)
            if (m_events[i] == event) {
                cursor = i + 1; // told already (the servers in between missed this one)
                return std::nullopt;
            }
        if (cursor > 0 && cursor == m_events.size() && m_events.back() == event)
            return std::nullopt; // said twice in a row by one server: "acquired" per attempt
        m_events.push_back(event);
        if (m_events.size() > 32) {
            m_events.pop_front();
            for (auto& [_, c] : m_cursor)
                c = c > 0 ? c - 1 : 0;
        }
        cursor = m_events.size();
        return event;
    }

  private:
    std::deque<std::string> m_events;
    std::map<size_t, size_t> m_cursor;
};

class Watch {
  public:
    Watch(const WatchOptions& options, const config::Config& config)
        : m_options(options), m_config(config), m_conns(redis::connect_all(config.servers)),
          m_terminal(!options.json && ::isatty(STDOUT_FILENO) == 1), m_json(!m_terminal) {}

    int run() {
        auto signals = process::SignalEvents::open();
        if (!signals)
            return report(signals.error());
        const std::string base = "{" + lock::glob_escape(m_config.key_prefix) + m_options.pattern;
        redis::Subscription notices(
            m_config.servers,
            redis::Subscription::Patterns{{base + "}:released", base + "}:events"}});
        notices.subscribe();
        if (notices.live() == 0)
            log::note("cannot subscribe to the locks' notices; reading them again every 5s");
        auto found = lock::list_names(m_conns, m_config.key_prefix, m_options.pattern);
        if (found.scanned == 0 && !found.failures.empty())
            return report(lock::unreadable_error(found.failures));
        if (m_terminal)
            write("\x1b[?1049h\x1b[?25l"); // the alternate screen, no cursor
        for (const auto& name : found.names)
            refresh(name, {});
        draw();
        std::vector<pollfd> fds;
        for (;;) {
            fds.assign(1, pollfd{signals->fd(), POLLIN, 0});
            notices.add_pollfds(fds);
            auto now = Clock::now();
            auto wake = now + (m_terminal ? 1s : 60s);
            if (notices.live() == 0)
                wake = std::min(wake, now + 5s);
            for (const auto& [name, w] : m_locks)
                if (w.view.state == lock::LockState::held && w.view.ttl_ms >= 0)
                    wake = std::min(wake, w.read_at + Millis(w.view.ttl_ms) + 50ms);
            int rc = ::poll(fds.data(), fds.size(), util::poll_timeout_ms(now, wake));
            if (rc > 0 && fds[0].revents)
                for (int sig : signals->read_pending())
                    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)
                        return finish();
            bool changed = false;
            if (rc > 0 && notices.on_events(std::span<const pollfd>(fds).subspan(1))) {
                if (m_conns.size() > 1)
                    settle(notices);
                // Each lock read once for what came together, every event of it told once,
                // in order: a hand-over says "released", "run recorded", then "acquired".
                std::map<std::string, std::vector<std::string>> heard;
                for (auto& m : notices.take_messages())
                    if (auto name = name_of(m.channel); name && m.payload != "redlock-doctor") {
                        auto& events = heard[*name];
                        if (auto event = m_told[*name].news(m.server, event_of(m.payload)))
                            events.push_back(std::move(*event));
                    }
                for (const auto& [name, events] : heard)
                    changed |= refresh(name, events);
            }
            if (notices.lost() || notices.incomplete()) {
                notices.subscribe();
                if (notices.live() > 0 && notices.lost())
                    changed |= rescan();
            }
            now = Clock::now();
            if (notices.live() == 0)
                changed |= rescan();
            // A lease that could have run out: renewed (renewals say nothing), or a holder
            // that died without a word. (Names first: a refresh may drop one from the map.)
            std::vector<std::string> due;
            for (const auto& [name, w] : m_locks)
                if (w.view.state == lock::LockState::held && w.view.ttl_ms >= 0 &&
                    now >= w.read_at + Millis(w.view.ttl_ms) + 50ms)
                    due.push_back(name);
            for (const auto& name : due)
                changed |= refresh(name, {}, true);
            if (changed || m_terminal)
                draw();
        }
    }

  private:
    // The other servers' notices of the same change come within a few milliseconds of the
    // first: heard together, each event is told once.
    static void settle(redis::Subscription& notices) {
        const auto until = Clock::now() + 30ms;
        std::vector<pollfd> fds;
        for (auto now = Clock::now(); now < until; now = Clock::now()) {
            fds.clear();
            notices.add_pollfds(fds);
            if (::poll(fds.data(), fds.size(), util::poll_timeout_ms(now, until)) <= 0)
                return;
            notices.on_events(fds);
        }
    }

    // The lock name a channel ({<prefix><name>}:released or :events) belongs to.
    std::optional<std::string> name_of(std::string_view channel) const {
        const std::string head = "{" + m_config.key_prefix;
        for (std::string_view tail : {"}:released", "}:events"})
            if (channel.starts_with(head) && channel.ends_with(tail))
                return std::string(
                    channel.substr(head.size(), channel.size() - head.size() - tail.size()));
        return std::nullopt;
    }

    static std::string event_of(std::string_view payload) {
        if (payload == "acquired")
            return "acquired";
        if (payload == "run")
            return "run recorded";
        if (payload.starts_with("shortened"))
            return "lease cut short";
        if (payload.starts_with("forced "))
            return "released by force";
        return "released";
    }

    // Reads one lock again after `events` were heard (none: the first look, or a look
    // without notices); true when what is shown changed. After `lease_ran_out` (no notice,
    // the lease's time is up) it tells what it finds: "expired", "acquired" by another, or
    // nothing when the holder renewed.
    bool refresh(const std::string& name, std::vector<std::string> events,
                 bool lease_ran_out = false) {
        Watched w;
        w.view = lock::inspect(m_conns, m_config.key_prefix, name, true);
        w.read_at = Clock::now();
        const lock::Keys keys(m_config.key_prefix, name);
        // Waiting: those on the wait list, and those listening to the release channel
        // (a --limit name's, or waiters refused their own channel); in the --fair queue.
        auto largest = [&](std::span<const std::string_view> argv, auto of) {
            long long most = 0;
            redis::request_all(m_conns, redis::encode_command(argv));
            for (const auto& c : m_conns)
                if (const auto& o = c.outcome(); o && o->reply)
                    most = std::max(most, of(*o->reply));
            return most;
        };
        auto integer = [](const redisReply& r) {
            return r.type == REDIS_REPLY_INTEGER ? r.integer : 0;
        };
        const std::array<std::string_view, 3> numsub{"PUBSUB", "NUMSUB", keys.released};
        const std::array<std::string_view, 2> listed{"ZCARD", keys.waiters};
        const std::array<std::string_view, 2> queued{"ZCARD", keys.queue};
        w.waiters =
            largest(listed, integer) + largest(numsub, [&](const redisReply& r) {
                return r.type == REDIS_REPLY_ARRAY && r.elements == 2 ? integer(*r.element[1]) : 0;
            });
        w.queue = largest(queued, integer);
        auto it = m_locks.find(name);
        const bool was_held = it != m_locks.end() && it->second.view.state != lock::LockState::free;
        const bool is_held = w.view.state != lock::LockState::free;
        if (lease_ran_out) {
            if (!is_held)
                events.push_back("expired");
            else if (was_held && it->second.view.token != w.view.token)
                events.push_back("acquired");
        }
        if (!is_held && !was_held && events.empty())
            return false;
        const bool same = it != m_locks.end() && it->second.view.state == w.view.state &&
                          it->second.view.token == w.view.token &&
                          it->second.waiters == w.waiters && it->second.queue == w.queue &&
                          it->second.view.held_permits().size() == w.view.held_permits().size();
        for (const auto& event : events) {
            m_events.push_front(util::format("{}  {}: {}{}", now_iso().substr(11, 12), name, event,
                                             is_held && w.view.holder
                                                 ? " (held by " + holder_text(w.view.holder) + ")"
                                                 : std::string()));
            if (m_events.size() > 8)
                m_events.pop_back();
            if (m_json)
                json_line(name, w, event);
        }
        if (m_json && events.empty() && !same)
            json_line(name, w, "watching");
        if (is_held)
            m_locks[name] = std::move(w);
        else
            m_locks.erase(name);
        return !same || !events.empty();
    }

    // Without notices (none could be subscribed, or they were lost): every lock read again.
    bool rescan() {
        bool changed = false;
        auto found = lock::list_names(m_conns, m_config.key_prefix, m_options.pattern);
        std::vector<std::string> names = found.names;
        for (const auto& [name, w] : m_locks)
            if (std::ranges::find(names, name) == names.end())
                names.push_back(name);
        for (const auto& name : names)
            changed |= refresh(name, {});
        return changed;
    }

    void json_line(const std::string& name, const Watched& w, const std::string& event) {
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
        json.field("permits_held", w.view.held_permits().size());
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
        if (m_locks.empty())
            out += "(no lock is held)\n";
        for (const auto& [name, w] : m_locks) {
            const auto& v = w.view;
            std::string holder =
                v.limit > 0 ? util::format("{} of {} permits", v.held_permits().size(), v.limit)
                : v.holder ? util::format("{}@{}:{}", v.holder->user, v.holder->host, v.holder->pid)
                           : std::string(v.state == lock::LockState::held ? "unknown" : "-");
            std::optional<Millis> age;
            if (v.holder)
                age = age_of(v.holder->acquired_at);
            const auto left =
                Millis(v.ttl_ms) - std::chrono::floor<Millis>(Clock::now() - w.read_at);
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
    std::vector<redis::Connection> m_conns;
    bool m_terminal;
    bool m_json; // a JSON line per change: asked for, or stdout is no terminal
    std::map<std::string, Watched> m_locks;
    std::map<std::string, Told> m_told;
    std::deque<std::string> m_events;
};

} // namespace

int watch_command(const WatchOptions& options, const config::Config& config) {
    return Watch(options, config).run();
}

} // namespace redlock::cli
