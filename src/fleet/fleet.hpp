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
//
// Reading every lock again (a sweep: the names SCAN finds, and those kept) goes a SCAN, then
// a batch of names (LockReader::k_batch), per step, so that the caller's loop is not held
// for long however many names there are: the exporter answers HTTP between two steps.

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <poll.h>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "fleet/read.hpp"
#include "lock/inspect.hpp"
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
        // Sweep now and then (the exporter), for what changes without a notice: another
        // client's lock, keys that expired, waiters enlisting, a server that lost its data.
        // The next sweep starts k_sweep_rest times as long after one ended as it took, and
        // k_sweep_least at the soonest: the servers spend about a twentieth of their time
        // on it at most, and a few thousand names are read again every two seconds.
        bool sweep = false;
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

    // Subscribes, then reads every lock, all at once (`interrupt_fd`: stop early when it is
    // readable). An error when no server could be read at all.
    [[nodiscard]] util::Expected<void> start(int interrupt_fd);

    // For the caller's poll loop: the fds to poll, and when to come back at the latest (now,
    // while a sweep goes on).
    void add_pollfds(std::vector<pollfd>& fds);
    [[nodiscard]] Clock::time_point next_wake(Clock::time_point now) const;
    // After poll() on those fds (the same ones, in order): notices read, locks read again,
    // subscriptions made again, a sweep started when one is due. True when what the model
    // shows changed.
    bool step(std::span<const pollfd> fds, int interrupt_fd);

    // A sweep under way: read its next batch (the caller decides when: the exporter lets
    // HTTP go first). The sweep ends with its last batch. True when what is shown changed;
    // `interrupted` (if given) set when `interrupt_fd` spoke first.
    [[nodiscard]] bool sweeping() const { return m_sweep.has_value(); }
    bool sweep(int interrupt_fd, bool* interrupted = nullptr);

    [[nodiscard]] const std::map<std::string, Entry>& locks() const { return m_locks; }
    // How many names left the model so far: pointers to the others' entries stay good
    // until it changes.
    [[nodiscard]] size_t erasures() const { return m_erasures; }
    [[nodiscard]] const std::vector<ServerState>& servers() const { return m_servers; }
    [[nodiscard]] const std::string& pattern() const { return m_options.pattern; }
    // When a sweep last read every lock; nullopt before the first.
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
    static constexpr auto k_sweep_least = std::chrono::seconds(2);
    static constexpr int k_sweep_rest = 20;

  private:
    class Told;
    // A sweep under way: listing the names (a SCAN a step), then reading them (a batch a
    // step), those listed and those kept.
    struct Sweep {
        std::unique_ptr<lock::NameScan> scan; // while listing
        std::vector<std::string> names;
        size_t next = 0;
        Clock::time_point started{};
    };

    void start_sweep();
    // The listing done: what is to be read, and which servers answered.
    void listed(lock::ListResult found);
    // Servers that failed are down; with `all_listed`, the others are up.
    void note_failures(const std::vector<lock::ServerView>& failures, bool all_listed);
    // Reads `names` again; `events` heard for each (none: a look without notices), and
    // whether their lease may have run out. True when what is shown changed.
    bool refresh(std::span<const std::string> names,
                 const std::map<std::string, std::vector<std::string>>& events, bool lease_ran_out,
                 int interrupt_fd, bool* interrupted = nullptr);
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
    size_t m_erasures = 0;
    // The names held with a lease (a TTL): read again once it could have run out. Few,
    // where m_locks may be 100,000: the poll loop looks at these alone.
    std::set<std::string> m_leased;
    std::map<std::string, std::unique_ptr<Told>> m_told;
    std::vector<ServerState> m_servers;
    std::optional<Clock::time_point> m_refreshed_at;
    std::optional<Sweep> m_sweep;
    std::optional<Clock::time_point> m_sweep_at; // the next periodic sweep (Options::sweep)
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
