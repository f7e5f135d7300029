#include "fleet/fleet.hpp"

#include <algorithm>
#include <utility>

#include "lock/inspect.hpp"
#include "lock/name.hpp"
#include "redis/fanout.hpp"
#include "util/clock.hpp"
#include "util/log.hpp"

namespace redlock::fleet {

namespace {

using namespace std::chrono_literals;
namespace log = util::log;

// What the payload of a notice says happened.
std::string event_of(std::string_view payload) {
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

// The other servers' notices of the same change come within a few milliseconds of the
// first: heard together, each event is told once.
void settle(redis::Subscription& notices) {
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

// How many messages one wake-up of a pattern subscription keeps (redis/subscription.cpp):
// as many mean some may have been dropped.
constexpr size_t k_kept_messages = 1024;

bool same_shown(const LockRecord& a, const LockRecord& b) {
    return a.view.state == b.view.state && a.view.token == b.view.token && a.waiters == b.waiters &&
           a.queue == b.queue && a.view.permits_held == b.view.permits_held;
}

bool leased(const LockRecord& r) {
    return r.view.state == lock::LockState::held && r.view.ttl_ms >= 0;
}

} // namespace

// Every server announces what happens to a lock on it, and not always at once: what one
// server says is news only if no other said it already. The events told, latest last, and
// how far each server's own announcements have caught up with them; kept a few seconds
// after the last notice of the name (Fleet::k_told_memory).
class Fleet::Told {
  public:
    std::optional<std::string> news(size_t server, std::string event, Clock::time_point now) {
        m_heard_at = now;
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
            m_events.erase(m_events.begin());
            for (auto& [_, c] : m_cursor)
                c = c > 0 ? c - 1 : 0;
        }
        cursor = m_events.size();
        return event;
    }
    [[nodiscard]] Clock::time_point heard_at() const { return m_heard_at; }

  private:
    std::vector<std::string> m_events;
    std::map<size_t, size_t> m_cursor;
    Clock::time_point m_heard_at{};
};

Fleet::Fleet(const config::Config& config, Options options, Listener* listener)
    : m_config(config), m_options(std::move(options)), m_listener(listener), m_reader(config) {
    for (const auto& server : config.servers)
        m_servers.push_back({server.url.display(), false, "not read yet"});
}

Fleet::~Fleet() = default;

util::Expected<void> Fleet::start(int interrupt_fd) {
    const std::string base = "{" + lock::glob_escape(m_config.key_prefix) + m_options.pattern;
    m_notices = std::make_unique<redis::Subscription>(
        m_config.servers, redis::Subscription::Patterns{{base + "}:released", base + "}:events"}});
    m_notices->subscribe();
    if (m_notices->live() == 0) {
        log::note("cannot subscribe to the locks' notices; reading them again every {}s until "
                  "it can",
                  k_poll_without_notices.count());
    }
    if (m_notices->live() < m_config.servers.size())
        m_resubscribe_at = Clock::now() + m_resubscribe_backoff;
    auto found =
        lock::list_names(m_reader.connections(), m_config.key_prefix, m_options.pattern, true);
    if (found.scanned == 0 && !found.failures.empty())
        return std::unexpected(lock::unreadable_error(found.failures));
    start_sweep();
    bool interrupted = false;
    while (m_sweep && !interrupted)
        (void)sweep(interrupt_fd, &interrupted);
    return {};
}

size_t Fleet::listening() const {
    return m_notices ? m_notices->live() : 0;
}

void Fleet::add_pollfds(std::vector<pollfd>& fds) {
    const size_t before = fds.size();
    m_notices->add_pollfds(fds);
    m_polled_live = fds.size() - before;
    if (m_subscribing)
        redis::add_pollfds(m_notices->connecting(), fds);
    m_polled_connecting = fds.size() - before - m_polled_live;
}

Clock::time_point Fleet::next_wake(Clock::time_point now) const {
    if (m_sweep)
        return now;
    auto wake = now + 60s;
    if (m_notices->live() == 0 && m_refreshed_at)
        wake = std::min(wake, *m_refreshed_at + k_poll_without_notices);
    if (m_sweep_at)
        wake = std::min(wake, *m_sweep_at);
    if (m_resubscribe_at && !m_subscribing)
        wake = std::min(wake, *m_resubscribe_at);
    if (m_subscribing)
        if (auto d = redis::earliest_deadline(m_notices->connecting()))
            wake = std::min(wake, *d);
    for (const auto& name : m_leased)
        if (auto it = m_locks.find(name); it != m_locks.end())
            wake =
                std::min(wake, it->second.read_at +
                                   std::chrono::milliseconds(it->second.record.view.ttl_ms) + 50ms);
    return std::max(wake, now);
}

std::optional<std::string> Fleet::name_of(std::string_view channel) const {
    // (Anyone may publish on a channel the pattern matches: a name redlock could not have
    // made is no lock's, as SCAN's are checked too.)
    const std::string head = "{" + m_config.key_prefix;
    for (std::string_view tail : {"}:released", "}:events"})
        if (channel.starts_with(head) && channel.ends_with(tail) &&
            channel.size() > head.size() + tail.size()) {
            auto name = channel.substr(head.size(), channel.size() - head.size() - tail.size());
            if (!lock::validate_name(name))
                return std::nullopt;
            return std::string(name);
        }
    return std::nullopt;
}

void Fleet::forget_told(Clock::time_point now) {
    if (m_told.size() < 64)
        return;
    std::erase_if(m_told,
                  [&](const auto& item) { return item.second->heard_at() + k_told_memory < now; });
    if (m_told.size() <= k_told_most)
        return;
    // A burst of names: the half heard of longest ago goes (at worst, a late server's
    // notice of one of their events is told again).
    std::vector<Clock::time_point> times;
    for (const auto& [_, told] : m_told)
        times.push_back(told->heard_at());
    auto middle = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
    std::ranges::nth_element(times, middle);
    std::erase_if(m_told, [&](const auto& item) { return item.second->heard_at() < *middle; });
}

bool Fleet::step(std::span<const pollfd> fds, int interrupt_fd) {
    bool changed = false;
    auto now = Clock::now();
    const auto live_fds = fds.subspan(0, std::min(fds.size(), m_polled_live));
    if (m_subscribing) {
        redis::dispatch(m_notices->connecting(),
                        fds.subspan(live_fds.size(),
                                    std::min(fds.size() - live_fds.size(), m_polled_connecting)),
                        now);
        if (!redis::any_busy(m_notices->connecting())) {
            m_subscribing = false;
            m_notices->settle();
            if (m_notices->live() == m_config.servers.size()) {
                m_resubscribe_at.reset();
                m_resubscribe_backoff = k_resubscribe_first;
            } else {
                m_resubscribe_at = now + m_resubscribe_backoff;
                m_resubscribe_backoff =
                    std::min<Clock::duration>(m_resubscribe_backoff * 2, k_resubscribe_most);
            }
        }
    }

    const size_t live_before = m_notices->live();
    if (!live_fds.empty() && m_notices->on_events(live_fds)) {
        if (m_config.servers.size() > 1)
            settle(*m_notices);
        // Each lock read once for what came together, every event of it told once, in
        // order: a hand-over says "released", "run recorded", then "acquired".
        auto messages = m_notices->take_messages();
        if (messages.size() >= k_kept_messages)
            m_missed_notices = true; // a burst: some may not have been kept
        std::map<std::string, std::vector<std::string>> heard;
        now = Clock::now();
        for (auto& m : messages)
            if (auto name = name_of(m.channel); name && m.payload != "redlock-doctor") {
                auto& events = heard[*name];
                auto& told = m_told[*name];
                if (!told)
                    told = std::make_unique<Told>();
                if (auto event = told->news(m.server, event_of(m.payload), now))
                    events.push_back(std::move(*event));
            }
        std::vector<std::string> names;
        for (const auto& [name, _] : heard)
            names.push_back(name);
        if (!names.empty())
            changed |= refresh(names, heard, false, interrupt_fd);
        forget_told(now);
    }
    now = Clock::now();
    // A subscription gone: closed by the server (lost), or dropped for what it sent (a
    // burst past the reader's bound, junk): made again, and every lock read once it is.
    if (m_notices->lost() || m_notices->live() < live_before) {
        m_missed_notices = true;
        if (!m_subscribing && (!m_resubscribe_at || m_notices->lost()))
            m_resubscribe_at = now;
    }
    if (m_resubscribe_at && !m_subscribing && now >= *m_resubscribe_at)
        subscribe_again(now);
    if (!m_subscribing && m_notices->live() > 0 && m_missed_notices) {
        m_missed_notices = false;
        start_sweep();
    } else if (!m_sweep && m_notices->live() == 0 &&
               (!m_refreshed_at || now >= *m_refreshed_at + k_poll_without_notices)) {
        start_sweep();
    } else if (!m_sweep && m_sweep_at && now >= *m_sweep_at) {
        start_sweep();
    }
    // A lease that could have run out: renewed (renewals say nothing), or a holder that
    // died without a word.
    now = Clock::now();
    std::vector<std::string> due;
    for (const auto& name : m_leased)
        if (auto it = m_locks.find(name);
            it != m_locks.end() &&
            now >= it->second.read_at + std::chrono::milliseconds(it->second.record.view.ttl_ms) +
                       50ms)
            due.push_back(name);
    if (!due.empty())
        changed |= refresh(due, {}, true, interrupt_fd);
    return changed;
}

void Fleet::subscribe_again(Clock::time_point now) {
    m_resubscribe_at.reset();
    if (!m_notices->incomplete() && !m_notices->lost()) {
        // Every server not listened to refused, or was dropped for what it sent: only a
        // subscription made anew asks them again. Notices until it is made are missed.
        const std::string base = "{" + lock::glob_escape(m_config.key_prefix) + m_options.pattern;
        m_notices = std::make_unique<redis::Subscription>(
            m_config.servers,
            redis::Subscription::Patterns{{base + "}:released", base + "}:events"}});
        m_missed_notices = true;
        log::verbose("subscribing to the locks' notices again");
    }
    m_notices->start_subscribe();
    m_subscribing = redis::any_busy(m_notices->connecting());
    if (!m_subscribing) {
        m_notices->settle();
        m_resubscribe_at = now + m_resubscribe_backoff;
        m_resubscribe_backoff =
            std::min<Clock::duration>(m_resubscribe_backoff * 2, k_resubscribe_most);
    }
}

void Fleet::start_sweep() {
    // The exporter follows the names with a record too (their lock free: run in the
    // history's age).
    m_sweep = Sweep{std::make_unique<lock::NameScan>(
                        m_reader.connections(), m_config.key_prefix, m_options.pattern, true,
                        m_options.keep_free ? lock::k_record_suffix : ""),
                    {},
                    0,
                    Clock::now()};
    m_sweep_at.reset();
}

void Fleet::note_failures(const std::vector<lock::ServerView>& failures, bool all_listed) {
    for (auto& server : m_servers) {
        auto failed = std::ranges::find(failures, server.name, &lock::ServerView::server);
        if (failed != failures.end()) {
            server.up = false;
            server.error = failed->error;
        } else if (all_listed) {
            server.up = true;
            server.error.clear();
        }
    }
}

void Fleet::listed(lock::ListResult found) {
    for (size_t i = 0; i < found.cluster.size(); ++i)
        m_reader.set_cluster(i, found.cluster[i]);
    note_failures(found.failures, true);
    auto& names = m_sweep->names;
    names = std::move(found.names);
    const size_t listed = names.size();
    for (const auto& [name, _] : m_locks)
        if (!std::binary_search(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(listed),
                                name))
            names.push_back(name);
}

bool Fleet::sweep(int interrupt_fd, bool* interrupted) {
    auto& sweep = *m_sweep;
    if (sweep.scan) {
        // Listing: a SCAN a step (a server that failed is down from then on).
        if (!sweep.scan->step()) {
            listed(std::move(*sweep.scan).result());
            sweep.scan.reset();
        } else {
            note_failures(sweep.scan->failures(), false);
        }
        return false;
    }
    const auto batch =
        std::span(sweep.names)
            .subspan(sweep.next, std::min(LockReader::k_batch, sweep.names.size() - sweep.next));
    bool stopped = false;
    const bool changed = refresh(batch, {}, false, interrupt_fd, &stopped);
    if (stopped) {
        if (interrupted)
            *interrupted = true;
        return changed; // (the same batch again at the next step)
    }
    sweep.next += batch.size();
    if (sweep.next < sweep.names.size())
        return changed;
    const auto now = Clock::now();
    m_refreshed_at = now;
    if (m_options.sweep)
        m_sweep_at =
            now + std::max<Clock::duration>(k_sweep_least, k_sweep_rest * (now - sweep.started));
    m_sweep.reset();
    return changed;
}

void Fleet::note_servers(const Reading& reading) {
    for (size_t i = 0; i < m_servers.size() && i < reading.errors.size(); ++i) {
        m_servers[i].up = reading.errors[i].empty();
        m_servers[i].error = reading.errors[i];
    }
}

bool Fleet::refresh(std::span<const std::string> names,
                    const std::map<std::string, std::vector<std::string>>& events,
                    bool lease_ran_out, int interrupt_fd, bool* interrupted) {
    // A pipeline's worth at a time: what a reading holds is bounded, however many names.
    bool changed = false;
    for (size_t first = 0; first < names.size(); first += LockReader::k_batch) {
        const auto chunk =
            names.subspan(first, std::min(LockReader::k_batch, names.size() - first));
        auto reading = m_reader.read(chunk, interrupt_fd);
        if (reading.interrupted) {
            if (interrupted)
                *interrupted = true;
            return changed;
        }
        note_servers(reading);
        const auto now = Clock::now();
        for (size_t k = 0; k < chunk.size(); ++k) {
            auto it = events.find(chunk[k]);
            changed |= apply(chunk[k], std::move(reading.locks[k]),
                             it == events.end() ? std::vector<std::string>{} : it->second,
                             lease_ran_out, now);
        }
    }
    return changed;
}

bool Fleet::apply(const std::string& name, LockRecord record, std::vector<std::string> events,
                  bool lease_ran_out, Clock::time_point now) {
    auto it = m_locks.find(name);
    const bool known = it != m_locks.end();
    const bool was_held = known && it->second.record.view.state != lock::LockState::free;
    const bool is_held = record.view.state != lock::LockState::free;
    // After the lease's time is up (no notice): "expired", "acquired" by another, or
    // nothing when the holder renewed.
    if (lease_ran_out) {
        if (!is_held)
            events.emplace_back("expired");
        else if (was_held && it->second.record.view.token != record.view.token)
            events.emplace_back("acquired");
    }
    const bool same = known && same_shown(it->second.record, record);
    const bool tell = is_held || was_held || !events.empty();
    if (tell && m_listener) {
        for (const auto& event : events)
            m_listener->told(name, record, event);
        if (events.empty() && !same)
            m_listener->changed(name, record);
    }
    const bool keep = is_held || (m_options.keep_free && !record.gone());
    const bool lease = keep && leased(record);
    if (keep && !known && m_locks.size() >= m_options.max_names) {
        if (!std::exchange(m_said_too_many, true))
            log::note("following {} locks already; more are not kept", m_options.max_names);
        return tell && (!same || !events.empty());
    }
    if (keep) {
        m_locks.insert_or_assign(name, Entry{std::move(record), now});
    } else if (known) {
        m_locks.erase(it);
        ++m_erasures;
    }
    if (lease)
        m_leased.insert(name);
    else
        m_leased.erase(name);
    return tell && (!same || !events.empty());
}

} // namespace redlock::fleet
