#pragma once
// Waiting for a notice on one pub/sub channel on several servers at once: a waiter's own
// wake channel (lock::Lock::wake_channel), or a lock's release channel. Each server gets a
// connection of its own in subscribe mode. A release notice ("released ID"), a lease cut
// short ("shortened ID": the holder's PTTL changed), the connection closing, or bytes that
// make no sense (that server is then not listened to any more) all mean "something
// happened, look again"; "acquired" and "run" are no news; "forced ..." says who forced a
// release. Each server announces a release: it is news once, when the primary server
// (set_primary) announces it, or, without one, when a majority of the servers have.

#include <array>
#include <optional>
#include <poll.h>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "redis/connection.hpp"
#include "util/fd.hpp"

namespace redlock::redis {

class Subscription {
  public:
    Subscription(const std::vector<config::ServerConfig>& servers, std::string channel);
    // PSUBSCRIBE to every channel matching one of `patterns` (redlock watch): every message
    // is news, and which channels spoke is kept for take_messages().
    struct Patterns {
        std::vector<std::string> patterns;
    };
    Subscription(const std::vector<config::ServerConfig>& servers, Patterns patterns);

    // What pattern subscriptions heard since the last call: from which server (its index
    // in the constructor's order), on which channel, what.
    struct Message {
        size_t server = 0;
        std::string channel;
        std::string payload;
    };
    [[nodiscard]] std::vector<Message> take_messages() { return std::exchange(m_messages, {}); }

    // SUBSCRIBE on every server not subscribed yet (or lost since), all at once; returns
    // once every attempt has ended, or k_stragglers after a majority of the servers are
    // subscribed. A server
    // that refused (an ACL allowing no channels), or sent junk, is not asked again.
    void subscribe();
    static constexpr Clock::duration k_stragglers = std::chrono::milliseconds(20);
    // Subscribed now, on how many servers.
    [[nodiscard]] size_t live() const;
    // Whether a server not subscribed could still be (not refused).
    [[nodiscard]] bool incomplete() const;
    // A subscription was lost (closed, CLIENT KILL) since the last subscribe(): a release
    // may have passed unnoticed, so subscribe again and look at the lock once more.
    [[nodiscard]] bool lost() const { return m_lost; }

    // A pollfd (POLLIN) for each live subscription, in order.
    void add_pollfds(std::vector<pollfd>& fds) const;
    // After poll() on those fds: true if a release notice came or a subscription was lost.
    bool on_events(std::span<const pollfd> fds);
    // Server `index` (in the constructor's order) is the one whose notices count first:
    // where the waiters' attempts go first (Lock::leader), so its notice is the one that
    // says an attempt can succeed; another server's may come before the release has
    // reached it. Another server's notice of a release then wakes only if the primary has
    // not announced it within `grace` (frozen, down, or its release failed there), or its
    // subscription is gone; expire() says when.
    void set_primary(size_t index, Clock::duration grace);
    // When expire() may next have news: the earliest such grace to end.
    [[nodiscard]] std::optional<Clock::time_point> next_deadline() const;
    // True when a release heard only from another server is now news (its grace passed),
    // or a "next" notice (second in line) is, k_standby after it came.
    bool expire(Clock::time_point now);
    static constexpr Clock::duration k_standby = std::chrono::milliseconds(50);
    static constexpr Clock::duration k_majority_grace = std::chrono::milliseconds(50);
    // A message (or channel name) longer than this is no notice of redlock's (a few
    // hundred bytes at most): its bytes are dropped as they come, and it is passed over.
    static constexpr size_t k_max_notice = size_t{64} << 10;
    // Releases already news may be news again: the attempt one set off found the lock
    // still held where that release had not landed yet (the primary's notice, or a
    // majority's, came first); the other servers' notices of it, still to come or unread,
    // say when it has.
    void hear_again();
    // Whether the last news was a "next" notice's: look (Lock::looks_free) before trying.
    [[nodiscard]] bool standby_woke() { return std::exchange(m_standby_woke, false); }
    // The --limit permit (1..N) the first release heard since the last call freed
    // ("released ID pI"; to the second in line when its moment comes: it looks there
    // first, as the first did; 0: none said).
    [[nodiscard]] size_t take_freed_permit() { return std::exchange(m_freed_permit, 0); }
    // Who took the lock away with `release --force`, when one said so ("forced ID HOST PID
    // USER" on the channel, ID the token's lock::release_id): what a holder listening to
    // its own lock tells the user, once a renewal confirmed it. Anyone may publish there:
    // with only_forced_about(), a notice about another ID is no news and is not kept.
    struct Forcer {
        std::string host;
        long long pid = 0;
        std::string user;
    };
    void only_forced_about(std::string release_id) { m_forced_about = std::move(release_id); }
    // The last forcer heard since the last call.
    [[nodiscard]] std::optional<Forcer> take_forced_by() { return std::exchange(m_forced_by, {}); }

    // Without waiting, for a caller's own poll loop (a holder listening while it renews):
    // SUBSCRIBE is started where not subscribed yet; the caller polls connecting() with
    // redis::add_pollfds and redis::dispatch, then calls settle(), which takes the servers
    // that answered into the subscription.
    void start_subscribe();
    [[nodiscard]] std::span<Connection> connecting() { return m_conns; }
    [[nodiscard]] std::span<const Connection> connecting() const { return m_conns; }
    void settle() { collect(); }

  private:
    // Reads what is there; false when the connection is gone (it is closed here).
    bool drain(size_t i);
    // False when the bytes are no notices (not RESP, or a reply past the reader's limits).
    bool read_notices(size_t i, std::string_view bytes);
    // Closes subscription `i`: lost (the server closed it), or junk (not asked again).
    void drop(size_t i, bool junk);
    void collect();

    std::string m_channel;
    std::vector<std::string> m_patterns; // PSUBSCRIBE instead of SUBSCRIBE m_channel
    std::vector<Message> m_messages;
    std::vector<Connection> m_conns;                // for connecting, AUTH, SELECT and SUBSCRIBE
    std::vector<util::UniqueFd> m_fds;              // the subscribed sockets
    std::vector<std::optional<tls::Session>> m_tls; // their TLS sessions (rediss://)
    std::vector<std::optional<Reader>> m_readers;   // and what they say
    std::optional<Forcer> m_forced_by;
    std::optional<std::string> m_forced_about;
    bool m_released = false; // drain() read a release notice
    void remember(std::string id);
    // Whether the release `id` was news already (a late copy of it says nothing new).
    [[nodiscard]] bool already_news(const std::string& id) const;
    // Without a primary: whether this notice of release `id` makes it news (a majority
    // of the servers listened to have announced it; else expire() makes it news once
    // k_majority_grace has passed since the first).
    bool heard_from_majority(const std::string& id);

    // The ids of the last few releases already news (announced by the primary, or past
    // their grace): each release is announced on every server.
    std::array<std::string, 8> m_recent_releases;
    size_t m_next_recent = 0;
    // Releases heard from another server than the primary, not (yet) from it.
    struct Pending {
        std::string id;
        Clock::time_point deadline;
        size_t freed = 0; // a "next" notice's freed permit, told when it is news
    };
    std::vector<Pending> m_pending;
    std::optional<Pending> m_standby; // a "next" notice, news at its deadline
    bool m_standby_woke = false;
    size_t m_freed_permit = 0;
    std::optional<size_t> m_primary;
    Clock::duration m_primary_grace{};
    // Without one: the last few releases heard, and from how many servers.
    struct Heard {
        std::string id;
        size_t servers = 0;
        bool told = false;
        Clock::time_point deadline{}; // news by then all the same (a server frozen, cut off)
    };
    std::array<Heard, 8> m_heard;
    size_t m_next_heard = 0;
    std::vector<bool> m_refused;
    bool m_lost = false;
};

} // namespace redlock::redis
