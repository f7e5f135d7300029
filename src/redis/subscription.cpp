#include "redis/subscription.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <sys/socket.h>

#include "redis/fanout.hpp"
#include "redis/reply.hpp"

namespace redlock::redis {

Subscription::Subscription(const std::vector<config::ServerConfig>& servers, std::string channel)
    : m_channel(std::move(channel)), m_fds(servers.size()), m_tls(servers.size()),
      m_readers(servers.size()), m_refused(servers.size(), false) {
    m_conns.reserve(servers.size());
    for (const auto& s : servers)
        m_conns.emplace_back(s);
}

Subscription::Subscription(const std::vector<config::ServerConfig>& servers, Patterns patterns)
    : Subscription(servers, std::string()) {
    m_patterns = std::move(patterns.patterns);
}

void Subscription::collect() {
    for (size_t i = 0; i < m_conns.size(); ++i) {
        auto& conn = m_conns[i];
        const auto& outcome = conn.outcome();
        if (!m_fds[i] && !conn.busy() && outcome && outcome->failure &&
            outcome->failure->kind == FailureKind::protocol) {
            m_refused[i] = true; // junk, or a reply past the reader's limits: as in drain()
            continue;
        }
        if (m_fds[i] || conn.busy() || !outcome || !outcome->reply || conn.fd() < 0)
            continue;
        const redisReply& reply = *outcome->reply;
        if (reply.type == REDIS_REPLY_ARRAY && reply.elements >= 1 &&
            reply.element[0]->type == REDIS_REPLY_STRING &&
            (text(*reply.element[0]) == "subscribe" || text(*reply.element[0]) == "psubscribe")) {
            auto stream = conn.detach();
            m_fds[i] = std::move(stream.fd);
            m_tls[i] = std::move(stream.tls);
            m_readers[i].emplace();
            m_readers[i]->pass_over_bulks_longer_than(k_max_notice);
        } else if (is_error(reply)) // NOPERM: this user may not use the channel
            m_refused[i] = is_auth_error(reply);
    }
}

void Subscription::start_subscribe() {
    m_lost = false;
    std::vector<std::string_view> argv{"SUBSCRIBE", m_channel};
    if (!m_patterns.empty()) {
        argv.assign(1, "PSUBSCRIBE");
        argv.insert(argv.end(), m_patterns.begin(), m_patterns.end());
    }
    const auto command = encode_command(argv);
    auto now = Clock::now();
    for (size_t i = 0; i < m_conns.size(); ++i)
        if (!m_fds[i] && !m_refused[i] && !m_conns[i].busy())
            m_conns[i].start(command, {}, now);
}

void Subscription::subscribe() {
    start_subscribe();
    const size_t majority = m_conns.size() / 2 + 1;
    // Once a majority is subscribed, the others get a moment more (a server frozen or far
    // away costs that, not its timeouts): each release wakes by every server it reached.
    std::optional<Clock::time_point> until;
    (void)wait(
        m_conns,
        [&] {
            collect();
            if (live() < majority)
                return false;
            if (!until)
                until = Clock::now() + k_stragglers;
            return Clock::now() >= *until;
        },
        -1, &until);
    collect();
}

size_t Subscription::live() const {
    size_t n = 0;
    for (const auto& fd : m_fds)
        n += static_cast<bool>(fd);
    return n;
}

bool Subscription::incomplete() const {
    for (size_t i = 0; i < m_fds.size(); ++i)
        if (!m_fds[i] && !m_refused[i])
            return true;
    return false;
}

void Subscription::add_pollfds(std::vector<pollfd>& fds) const {
    for (const auto& fd : m_fds)
        if (fd)
            fds.push_back(pollfd{fd.get(), POLLIN, 0});
}

bool Subscription::read_notices(size_t i, std::string_view bytes) {
    Reader& reader = *m_readers[i];
    if (!reader.feed(bytes))
        return false;
    for (;;) {
        auto next = reader.next();
        if (!next)
            return false;
        if (!*next)
            return true;
        ReplyPtr reply = std::move(*next);
        // ["pmessage", pattern, channel, payload] of a pattern subscription: kept, and news.
        if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 4 &&
            text(*reply->element[0]) == "pmessage" &&
            reply->element[2]->type == REDIS_REPLY_STRING &&
            reply->element[3]->type == REDIS_REPLY_STRING) {
            if (m_messages.size() < 1024)
                m_messages.push_back(Message{i, std::string(text(*reply->element[2])),
                                             std::string(text(*reply->element[3]))});
            m_released = true;
            continue;
        }
        // ["message", channel, payload]; the payload is the count of waiters, or "released",
        // or "shortened" (a lease cut short: no count, but news all the same).
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
            reply->element[2]->type != REDIS_REPLY_STRING)
            continue;
        std::string payload(text(*reply->element[2]));
        if (payload == "acquired") // someone won: no release, nothing to wake for
            continue;
        if (payload == "run") // a run's history entry written (the events channel): no news
            continue;
        // "forced ID HOST PID USER": release --force; news, and who did it (about our
        // token only, with only_forced_about).
        if (payload.starts_with("forced ")) {
            std::vector<std::string> words;
            for (size_t at = 0; at < payload.size();) {
                const size_t end = std::min(payload.find(' ', at), payload.size());
                words.emplace_back(payload.substr(at, end - at));
                at = end + 1;
            }
            if (m_forced_about && (words.size() < 2 || words[1] != *m_forced_about))
                continue;
            if (words.size() >= 5)
                m_forced_by =
                    Forcer{words[2], std::strtoll(words[3].c_str(), nullptr, 10), words[4]};
            m_released = true;
            continue;
        }
        // "released ID" ("COUNT ID" from 0.2, which also sent a bare count). With a primary
        // server (set_primary), another server's notice of a release is news only if the
        // primary does not announce it first or soon after. Without one, once a majority
        // of the servers listened to announced it: an attempt on every server can then
        // win, and the crowd on its release channel, or the two a release woke, try once.
        if (auto space = payload.find(' '); space != std::string::npos) {
            std::string id = payload.substr(space + 1);
            payload.resize(space);
            // Second in line (lock/scripts.hpp, k_wake): news a moment later, if no release
            // came meanwhile; the waiter then looks before it tries.
            const bool second = id.ends_with(" next");
            if (second)
                id.resize(id.size() - 5);
            // "ID pI": the --limit permit I was freed (lock/scripts.hpp, k_release_notice).
            size_t freed = 0;
            if (auto p = id.rfind(" p"); p != std::string::npos) {
                const std::string_view digits = std::string_view(id).substr(p + 2);
                const auto [end, ec] =
                    std::from_chars(digits.data(), digits.data() + digits.size(), freed);
                if (ec == std::errc() && end == digits.data() + digits.size() && freed > 0)
                    id.resize(p);
                else
                    freed = 0;
            }
            if (second) {
                if (!m_standby &&
                    std::ranges::find(m_recent_releases, id) == m_recent_releases.end())
                    m_standby = Pending{std::move(id), Clock::now() + k_standby, freed};
                continue;
            }
            // The first one heard, not the last: a waiter told of a second release before
            // it tried (a stuck one is told again, k_wake) tries the permit it heard of
            // first, and the one the second release woke first tries the second's. A
            // release already news (another server's late copy of it) says nothing new.
            if (freed > 0 && m_freed_permit == 0 && !already_news(id))
                m_freed_permit = freed;
            if (m_primary && i == *m_primary) {
                std::erase_if(m_pending, [&](const Pending& p) { return p.id == id; });
                remember(std::move(id));
            } else if (m_primary) {
                if (already_news(id))
                    continue; // the primary said it first
                if (m_fds[*m_primary]) {
                    if (std::ranges::find(m_pending, id, &Pending::id) == m_pending.end())
                        m_pending.push_back(Pending{std::move(id), Clock::now() + m_primary_grace});
                    continue;
                }
            } else if (!heard_from_majority(id)) {
                continue;
            }
        }
        m_released = true;
        m_standby.reset(); // first in line now, or the lock changed: worth a try at once
    }
}

bool Subscription::already_news(const std::string& id) const {
    return std::ranges::find(m_recent_releases, id) != m_recent_releases.end() ||
           std::ranges::any_of(m_heard, [&](const Heard& h) { return h.told && h.id == id; });
}

bool Subscription::heard_from_majority(const std::string& id) {
    auto it = std::ranges::find(m_heard, id, &Heard::id);
    if (it == m_heard.end()) {
        it = m_heard.begin() + static_cast<std::ptrdiff_t>(m_next_heard++ % m_heard.size());
        *it = Heard{id, 0, false, Clock::now() + k_majority_grace};
    }
    size_t live = 0;
    for (const auto& fd : m_fds)
        live += fd ? 1 : 0;
    // A majority of those subscribed when fewer are: the rest cannot announce anything.
    const size_t need = std::max<size_t>(std::min(m_conns.size() / 2 + 1, live), 1);
    if (it->told || ++it->servers < need)
        return false;
    it->told = true;
    return true;
}

bool Subscription::drain(size_t i) {
    std::array<char, 4096> buffer{};
    // A bounded number of reads per wake-up, so that a server sending without pause (a
    // large message, a flood of them) cannot keep the waiter from its signals and
    // deadlines: the rest is read at the next, and nothing of it is held meanwhile
    // (k_max_notice). Anyone who may publish can send that: it is no reason to stop
    // listening and poll instead.
    constexpr int k_max_reads = 64;
    for (int reads = 0; reads < k_max_reads; ++reads) {
        size_t n = 0;
        if (m_tls[i]) {
            // Until the session has nothing more: what OpenSSL already read, poll() cannot
            // see.
            switch (m_tls[i]->read(buffer.data(), buffer.size(), n)) {
            case tls::Session::Status::done:
                break;
            case tls::Session::Status::want_read:
            case tls::Session::Status::want_write: // a key update; the next event goes on
                return true;
            case tls::Session::Status::closed:
            case tls::Session::Status::failed:
                drop(i, false);
                return false;
            }
        } else {
            ssize_t got = ::recv(m_fds[i].get(), buffer.data(), buffer.size(), MSG_DONTWAIT);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return true;
            if (got <= 0) { // closed by the server (restart, CLIENT KILL) or an error
                drop(i, false);
                return false;
            }
            n = static_cast<size_t>(got);
        }
        if (!read_notices(i, std::string_view(buffer.data(), n))) {
            drop(i, true);
            return false;
        }
    }
    return true;
}

void Subscription::drop(size_t i, bool junk) {
    m_tls[i].reset();
    m_fds[i].reset();
    m_readers[i].reset();
    // A server that sends junk is not listened to again, as one that refused: subscribed
    // again, it would only send more.
    if (junk)
        m_refused[i] = true;
    else
        m_lost = true;
}

void Subscription::remember(std::string id) {
    m_recent_releases[m_next_recent++ % m_recent_releases.size()] = std::move(id);
}

void Subscription::hear_again() {
    m_recent_releases = {};
    m_heard = {};
}

void Subscription::set_primary(size_t index, Clock::duration grace) {
    m_primary = index;
    m_primary_grace = grace;
}

std::optional<Clock::time_point> Subscription::next_deadline() const {
    std::optional<Clock::time_point> first;
    if (m_standby)
        first = m_standby->deadline;
    for (const auto& h : m_heard)
        if (!h.told && h.servers > 0 && (!first || h.deadline < *first))
            first = h.deadline;
    for (const auto& p : m_pending)
        if (!first || p.deadline < *first)
            first = p.deadline;
    return first;
}

bool Subscription::expire(Clock::time_point now) {
    bool woken = false;
    if (m_standby && m_standby->deadline <= now) {
        remember(std::move(m_standby->id));
        if (m_standby->freed > 0 && m_freed_permit == 0)
            m_freed_permit = m_standby->freed;
        m_standby.reset();
        m_standby_woke = true;
        woken = true;
    }
    for (auto& h : m_heard)
        if (!h.told && h.servers > 0 && h.deadline <= now) {
            h.told = true; // the others did not announce it in time: it is all there is
            woken = true;
            m_standby_woke = false; // a release, not only a "next": try at once
            m_standby.reset();
        }
    for (auto it = m_pending.begin(); m_primary && it != m_pending.end();) {
        // The primary did not announce it (frozen, down, or its release failed there), or
        // it went away meanwhile: the other server's notice is all there is.
        if (it->deadline <= now || !m_fds[*m_primary]) {
            remember(std::move(it->id));
            it = m_pending.erase(it);
            woken = true;
        } else {
            ++it;
        }
    }
    return woken;
}

bool Subscription::on_events(std::span<const pollfd> fds) {
    bool woken = false;
    size_t k = 0;
    for (size_t i = 0; i < m_fds.size(); ++i) {
        if (!m_fds[i])
            continue;
        if (k < fds.size() && fds[k].fd == m_fds[i].get() && fds[k].revents != 0) {
            m_released = false;
            // A lost connection wakes, and so does junk that is no notice at all (that
            // server is not listened to any more): better an attempt too many.
            if (!drain(i) || m_released)
                woken = true;
        }
        ++k;
    }
    return woken;
}

} // namespace redlock::redis
