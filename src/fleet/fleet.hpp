#pragma once
// The fleet view: every lock whose name matches a glob, over the configured servers, as one
// model that `watch` (the terminal, JSON lines) and `exporter` (metrics, the page, the API)
// render. It follows the servers' notices (a pattern subscription to the locks' release and
// events channels): a lock is read again when one of its channels speaks, and when its
// lease could have run out (a holder that died says nothing). Each event, announced by
// every server, is told once. Readings wait for a majority of the servers, never for a
// frozen one (fleet/read.hpp).
//
// It runs for weeks: what it keeps is bounded. A name is kept while it is held (or, for the
// exporter, while anything of it is left on the servers), and at most Options::max_names of
// them; what it needs to tell events once is kept for a few seconds. A subscription that is
// lost, refused or dropped (a burst of notices past the reader's bound) is made again, with
// a backoff, and every lock read again once it is: no event is missed for good, and no
// poll on a timer lasts longer than the subscription is away.

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <poll.h>
#include <span>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "fleet/read.hpp"
#include "redis/subscription.hpp"
#include "util/error.hpp"

namespace redlock::fleet {

// What the views hear from the model.
class Listener {
  public:
    virtual ~Listener() = default;
    // An event of `name` ("acquired", "released", "run recorded", "lease cut short",
    // "released by force", "expired"), told once across the servers, with the lock as read
    // just after it.
    virtual void told(const std::string& name, const LockRecord& record, const std::string& event) {
        (void)name, (void)record, (void)event;
    }
    // What is shown of `name` changed without an event (the first look, a waiter more).
    virtual void changed(const std::string& name, const LockRecord& record) {
        (void)name, (void)record;
    }
};

class Fleet {
  public:
    struct Options {
        std::string pattern = "*";
        // Keep free names whose counters, history or waiters are on the servers (the
        // exporter), not only those held (watch).
        bool keep_free = false;
        size_t max_names = 100'000;
    };

    struct Entry {
        LockRecord record;
        Clock::time_point read_at{};
    };

    struct ServerState {
        std::string name; // redacted: no password
        bool up = false;  // answered the last reading
        std::string error;
    };

    Fleet(const config::Config& config, Options options, Listener* listener = nullptr);
    ~Fleet();

    // Subscribes, then reads every lock (`interrupt_fd`: stop early when it is readable).
    // An error when no server could be read at all.
    [[nodiscard]] util::Expected<void> start(int interrupt_fd);

    // For the caller's poll loop: the fds to poll, and when to come back at the latest.
    void add_pollfds(std::vector<pollfd>& fds);
    [[nodiscard]] Clock::time_point next_wake(Clock::time_point now) const;
    // After poll() on those fds (the same ones, in order): notices read, locks read again,
    // subscriptions made again. True when what the model shows changed.
    bool step(std::span<const pollfd> fds, int interrupt_fd);

    // Every lock read again (names found by SCAN, and those in the model). False when it was
    // interrupted.
    bool refresh_all(int interrupt_fd);

    [[nodiscard]] const std::map<std::string, Entry>& locks() const { return m_locks; }
    [[nodiscard]] const std::vector<ServerState>& servers() const { return m_servers; }
    [[nodiscard]] const std::string& pattern() const { return m_options.pattern; }
    // When every lock was last read (refresh_all); nullopt before the first.
    [[nodiscard]] std::optional<Clock::time_point> refreshed_at() const { return m_refreshed_at; }
    // Subscribed on how many servers.
    [[nodiscard]] size_t listening() const;

    // The events the model keeps to tell each once (for tests of its bounds).
    [[nodiscard]] size_t remembered() const { return m_told.size(); }

    // How long events are remembered to be told once; past it a server's late notice of an
    // event would be told again (they come within milliseconds of each other).
    static constexpr auto k_told_memory = std::chrono::seconds(2);
    static constexpr size_t k_told_most = 1024; // names; the oldest half goes past it
    // The poll while no subscription works; and the backoff of making one again.
    static constexpr auto k_poll_without_notices = std::chrono::seconds(5);
    static constexpr auto k_resubscribe_first = std::chrono::seconds(1);
    static constexpr auto k_resubscribe_most = std::chrono::seconds(30);

  private:
    class Told;

    // Reads `names` again; `events` heard for each (none: a look without notices), and
    // whether their lease may have run out. True when what is shown changed.
    bool refresh(const std::vector<std::string>& names,
                 const std::map<std::string, std::vector<std::string>>& events, bool lease_ran_out,
                 int interrupt_fd);
    bool apply(const std::string& name, LockRecord record, std::vector<std::string> events,
               bool lease_ran_out, Clock::time_point now);
    void note_servers(const Reading& reading);
    void subscribe_again(Clock::time_point now);
    [[nodiscard]] std::optional<std::string> name_of(std::string_view channel) const;
    void forget_told(Clock::time_point now);

    const config::Config& m_config;
    Options m_options;
    Listener* m_listener;
    LockReader m_reader;
    std::unique_ptr<redis::Subscription> m_notices;
    std::map<std::string, Entry> m_locks;
    std::map<std::string, std::unique_ptr<Told>> m_told;
    std::vector<ServerState> m_servers;
    std::optional<Clock::time_point> m_refreshed_at;
    // The subscription: made again from this time on, and the backoff after it.
    std::optional<Clock::time_point> m_resubscribe_at;
    Clock::duration m_resubscribe_backoff = k_resubscribe_first;
    bool m_subscribing = false;
    bool m_missed_notices = false; // read every lock once the subscription is back
    size_t m_polled_live = 0;      // subscriptions polled by the last add_pollfds
    size_t m_polled_connecting = 0;
    bool m_said_too_many = false;
};

} // namespace redlock::fleet
