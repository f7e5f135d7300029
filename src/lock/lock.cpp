#include "lock/lock.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <poll.h>

#include "config/server_url.hpp"
#include "lock/holder.hpp"
#include "lock/name.hpp"
#include "lock/scripts.hpp"
#include "redis/fanout.hpp"
#include "util/format.hpp"
#include "util/random.hpp"

namespace redlock::lock {

using Vote = ServerResult::Vote;

Lock::Lock(const std::vector<config::ServerConfig>& servers, Keys keys, std::string token,
           Millis ttl, std::vector<std::string> holder)
    : m_keys{keys.lock, keys.meta, keys.fence_field, keys.old_fence}, m_name(std::move(keys)),
      m_token(std::move(token)), m_waiter(util::random_token().substr(0, 16)),
      m_holder(std::move(holder)), m_ttl(ttl) {
    m_conns.reserve(servers.size());
    for (const auto& s : servers)
        m_conns.emplace_back(s);
}

void Lock::forget_renewal() {
    m_renew_command.clear();
    m_renew_fallback.clear();
}

std::string Lock::wait_command(const redis::Connection& conn) const {
    // Bounded well inside the lease and the command timeout: replicas that do not answer
    // in time fail the write, with WAIT's count.
    const auto timeout = std::clamp<Millis>(
        std::min<Millis>(conn.server().command_timeout / 2, m_ttl / 10), Millis(1), Millis(60000));
    const auto replicas = std::to_string(conn.server().replicas);
    const auto ms = std::to_string(timeout.count());
    const std::array<std::string_view, 3> argv{"WAIT", replicas, ms};
    return redis::encode_command(argv);
}

void Lock::send_writes(const std::string& command, const std::string& fallback,
                       Clock::time_point now, const std::vector<bool>& only,
                       const std::string& after) {
    std::vector<bool> plain(m_conns.size());
    bool replicated = false;
    for (size_t i = 0; i < m_conns.size(); ++i) {
        plain[i] = (only.empty() || only[i]) && m_conns[i].server().replicas == 0;
        replicated |= (only.empty() || only[i]) && !plain[i];
    }
    if (!replicated) {
        send_all(command, fallback, now, only, after);
        return;
    }
    send_all(command, fallback, now, plain, after);
    // As EVAL, so that no NOSCRIPT reply comes between the write and its WAIT.
    for (size_t i = 0; i < m_conns.size(); ++i)
        if ((only.empty() || only[i]) && !plain[i])
            m_conns[i].start_pipelined((fallback.empty() ? command : fallback) +
                                           wait_command(m_conns[i]) + after,
                                       after.empty() ? 1 : 2, now);
}

void Lock::send_all(const std::string& command, const std::string& fallback, Clock::time_point now,
                    const std::vector<bool>& only, const std::string& after) {
    // A connection about to be (re)made may reach a server that has never seen our scripts
    // (first contact, or restarted empty). Its request goes as EVAL at once: an EVALSHA
    // there needs a NOSCRIPT round trip, and a straggler abandoned once the round is decided
    // would never send the fallback, so a release (or renewal) would silently not run.
    // With a command `after` it (the history's entry), both go in one write as EVAL: no
    // NOSCRIPT reply can then come between them, and no round trip is added.
    for (size_t i = 0; i < m_conns.size(); ++i) {
        auto& c = m_conns[i];
        if (!only.empty() && !only[i])
            continue;
        if (!after.empty())
            c.start_pipelined((fallback.empty() ? command : fallback) + after, 1, now);
        else if ((c.fd() < 0 || command.empty()) && !fallback.empty())
            c.start(fallback, {}, now);
        else
            c.start(command, fallback, now);
    }
}

std::string Lock::history_command(const HistoryRecord& record) const {
    return lock::history_command(m_name, m_token, record);
}

void Lock::note_history(const std::vector<bool>& only) {
    m_history_failures.clear();
    for (size_t i = 0; i < m_conns.size(); ++i) {
        if (!only.empty() && !only[i])
            continue;
        const auto& outcome = m_conns[i].outcome();
        if (!outcome || outcome->trailing.empty())
            continue; // not answered (not waited for): nothing known
        const auto& reply = *outcome->trailing.back();
        if (redis::is_error(reply))
            m_history_failures.push_back(
                util::format("{}: {}", m_conns[i].name(), redis::text(reply)));
    }
}

Tally Lock::tally() const {
    return lock::tally(m_conns);
}

std::vector<ServerResult> Lock::collect() const {
    std::vector<ServerResult> out;
    out.reserve(m_conns.size());
    for (const auto& c : m_conns)
        out.push_back(classify(c));
    return out;
}

size_t Lock::leader() const {
    if (m_leader)
        return *m_leader;
    // Rendezvous hashing: the server whose hash with the name is the largest. A server's
    // address in its canonical form (server_identities, without a DNS query), so that the
    // order of the list and the spelling of an IP address do not matter.
    auto hash = [](std::string_view a, std::string_view b) {
        std::uint64_t h = 14695981039346656037ULL; // FNV-1a, then a final mix
        for (std::string_view part : {a, std::string_view("\0", 1), b})
            for (unsigned char c : part)
                h = (h ^ c) * 1099511628211ULL;
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
        return h;
    };
    size_t best = 0;
    std::uint64_t best_hash = 0;
    for (size_t i = 0; i < m_conns.size(); ++i) {
        const auto ids = config::server_identities(m_conns[i].server().url, false);
        const auto h = hash(m_name.lock, ids.empty() ? m_conns[i].name() : ids.front());
        if (i == 0 || h > best_hash) {
            best = i;
            best_hash = h;
        }
    }
    m_leader = best;
    return best;
}

std::string_view Lock::holder_field(std::string_view name) const {
    for (size_t i = 0; i + 1 < m_holder.size(); i += 2)
        if (m_holder[i] == name)
            return m_holder[i + 1];
    return {};
}

util::Expected<AcquireResult> Lock::acquire_key(int interrupt_fd, bool leader_first,
                                                const HistoryRecord* skip) {
    // A fresh token for every attempt after the first: a request of an earlier attempt
    // that runs late (a release finished by the background process, one abandoned on a
    // frozen server) must not find, and delete or extend, this attempt's key. The model
    // (tests/model) assumes exactly this.
    // The metadata names the token too, and when it was acquired: a waiter's attempt
    // after minutes of waiting is not "held for minutes".
    if (m_attempts++ > 0) {
        m_token = util::random_token();
        forget_renewal();
        for (size_t i = 0; i + 1 < m_holder.size(); i += 2)
            if (m_holder[i] == "token")
                m_holder[i + 1] = m_token;
            else if (m_holder[i] == "acquired_at")
                m_holder[i + 1] = iso8601_now();
    }
    std::vector<std::string> args{m_token, std::to_string(m_ttl.count())};
    const auto keeping = fence_args();
    args.insert(args.end(), keeping.begin(), keeping.end());
    std::vector<std::string> keys = script_keys();
    if (m_limit > 0) { // the permit's 0.4 counter, and N
        keys.push_back(m_keys.old_fence);
        args.push_back(std::to_string(m_limit));
    }
    if (m_ticket) { // --fair: the queue's keys, our ticket, when a silent waiter is dropped,
                    // our id and the wake channels' prefix
        keys.insert(keys.end(), {queue_key(), waiting_key()});
        args.insert(args.end(), {std::to_string(*m_ticket), std::to_string(k_drop_waiter.count()),
                                 m_waiter, m_name.wake});
    } else if (m_enlisted_at) { // on the wait list, by when we started waiting
        keys.push_back(m_name.waiters);
        args.insert(args.end(), {std::to_string(*m_enlisted_at), m_listed ? "1" : "0", m_waiter});
        if (m_limit == 0)
            args.push_back(m_name.wake);
        m_listed = true;
    }
    if (m_before_attempt)
        m_before_attempt(*this);
    const Script& script = m_limit > 0 ? k_acquire_permit_script : k_acquire_script;
    // EVALSHA only for a connection already open (a new one gets EVAL: send_all), so none
    // on a run's first attempt.
    const bool any_open = std::ranges::any_of(m_conns, [](const auto& c) { return c.fd() >= 0; });
    // The holder's fields come last (scripts.hpp), passed as they are stored.
    auto command = any_open ? script_call(script, true, keys, args, m_holder) : std::string();
    auto fallback = script_call(script, false, keys, args, m_holder);
    // A refusal to record (the last attempt of a run that will not wait on) goes in the
    // same write, to every server at once: where the lock is held, the refusal is recorded.
    const std::string after = skip ? history_command(*skip) : std::string();
    if (skip)
        leader_first = false;

    auto sent = Clock::now();
    const auto valid_until = lock::validity_end(sent, m_ttl);
    if (leader_first && m_conns.size() > 1) {
        // The leader alone first. Its "held" ends the attempt: nothing was written anywhere,
        // the others were not asked. A yes or a failure goes on to the others; the round is
        // then judged as any other, its validity counted from the leader's request.
        const size_t lead = leader();
        std::vector<bool> only(m_conns.size(), false);
        only[lead] = true;
        send_writes(command, fallback, sent, only);
        // A leader slow to answer (frozen, busy) is given up on as a failed vote, and the
        // attempt goes on without it: it costs a few round trips, not a timeout.
        const std::optional<Clock::time_point> patience =
            sent + std::max<Clock::duration>(k_leader_patience, m_round_trip * 4);
        auto waited = redis::wait(
            m_conns,
            [&] { return classify(m_conns[lead]).vote != Vote::none || Clock::now() >= *patience; },
            interrupt_fd, &patience);
        const auto answer = classify(m_conns[lead]);
        if (waited == redis::WaitResult::interrupted || answer.vote == Vote::no) {
            AcquireResult result;
            result.elapsed = Clock::now() - sent;
            for (size_t i = 0; i < m_conns.size(); ++i)
                result.servers.push_back(
                    i == lead ? answer
                              : ServerResult{.server = m_conns[i].name(), .detail = "not asked"});
            m_last_cleanup.clear();
            if (answer.vote == Vote::no) {
                result.servers[lead].detail = "held";
                result.status = AcquireStatus::held;
                result.leader_only = true;
                return result;
            }
            // Interrupted before the leader answered: its SET may land all the same.
            if (answer.written)
                m_last_cleanup = release(ReleaseWait::majority, only);
            result.status = AcquireStatus::interrupted;
            return result;
        }
        only.flip();
        send_writes(command, fallback, Clock::now(), only);
    } else {
        send_writes(command, fallback, sent, {}, after);
    }
    // Decided early only once the outcome can no longer change: a majority said yes, or
    // enough servers answered that the lock is known to be held. "Too few answered" (69) is
    // judged when every server answered or failed, so that a "held" still on its way is not
    // mistaken for an outage, and the message names only servers that really failed.
    //
    // Once a majority said yes, the other servers get a short grace (as long again as the
    // majority took, at least k_straggler_grace, at most a twentieth of the TTL), so that
    // every server heard from in time gets the fence too: written to all N servers, a fence
    // survives any minority of them restarting without its counter (see write_fence). A
    // server frozen or down costs the grace, not a timeout. Known to be held, the servers
    // still to answer get the same grace: a request already written there and abandoned
    // would need a clean-up release on a new connection (and the next attempt yet another
    // connection), when the answer, most likely "held" too, is a moment away.
    std::optional<Clock::time_point> grace_end;
    auto waited = redis::wait(
        m_conns,
        [&] {
            Tally t = tally();
            if (!t.won() && !(t.lost() && t.yes + t.no >= t.majority()))
                return false;
            auto now = Clock::now();
            if (!grace_end) {
                auto grace = std::max<Clock::duration>(now - sent, k_straggler_grace);
                grace_end = now + std::min<Clock::duration>(grace, m_ttl / 20);
            }
            return now >= *grace_end;
        },
        interrupt_fd, &grace_end);

    AcquireResult result;
    result.servers = collect();
    for (auto& s : result.servers)
        if (s.vote == Vote::no)
            s.detail = "held";
    Tally t = tally();
    // Round 1's answers decide between "held" and an outage: a fence round lost to a
    // competitor (whose round 2 raised a counter first) abandons servers that did answer.
    const size_t answered_round1 = t.yes + t.no;
    bool won = waited == redis::WaitResult::decided && t.won();
    if (won) {
        // The fence: the largest counter among the yes replies received, each server's
        // counter just incremented by its script. When they all agree, every one of those
        // servers (a majority) holds the fence already; otherwise a second round raises
        // the others to it (write_fence). One server: the fence its script wrote.
        std::vector<size_t> yes_servers;
        long long fence = 0;
        bool agree = true;
        for (size_t i = 0; i < m_conns.size(); ++i)
            if (result.servers[i].vote == Vote::yes) {
                const long long counter = m_conns[i].outcome()->reply->integer;
                agree = agree && (yes_servers.empty() || counter == fence);
                yes_servers.push_back(i);
                fence = std::max(fence, counter);
            }
        if (!agree)
            won = write_fence(yes_servers, fence, interrupt_fd, result.servers);
        result.fence_copies = yes_servers.size();
        result.elapsed = Clock::now() - sent;
        if (won && Clock::now() < valid_until) {
            result.status = AcquireStatus::acquired;
            result.fence = m_fence = fence;
            result.validity_end = m_validity_end = valid_until;
            m_round_trip = result.elapsed;
            return result;
        }
    }
    // A majority said yes (and confirmed the fence) too late: the lock is free for others,
    // not held, and no retry will be faster than these round trips.
    const bool too_slow = won;
    result.elapsed = Clock::now() - sent;

    // Not acquired. Servers that said "held" cannot have our token, nor can those the
    // request never reached (still connecting: a host slow to accept, or AUTH refused);
    // every other one might (a yes, or a SET that landed after we stopped listening), so
    // release there.
    std::vector<bool> to_release;
    bool any_to_release = false;
    for (const auto& r : result.servers) {
        to_release.push_back(r.vote != Vote::no && r.written);
        any_to_release |= to_release.back();
    }
    m_last_cleanup.clear();
    if (any_to_release)
        m_last_cleanup = release(ReleaseWait::majority, to_release);
    if (waited == redis::WaitResult::interrupted) {
        result.status = AcquireStatus::interrupted;
        return result;
    }
    if (auto shared = shared_node(m_conns))
        return std::unexpected(std::move(*shared));
    // --limit: the holders of this name have another limit, so this run must not join
    // them (neither limit would hold any more).
    for (const auto& r : result.servers)
        if (r.vote == Vote::failed && r.error == redis::ErrorCode::limit)
            return std::unexpected(util::Error{
                util::ErrorKind::usage,
                util::format("it is held with --limit {}, and this run asked for --limit {}: "
                             "every run of a name must give the same limit",
                             r.detail.substr(6), m_limit)});
    // Too few answers is an outage, not a lock held by someone else: round 1's answers,
    // less the servers that then failed in round 2 (not those merely not waited for).
    size_t answered = answered_round1;
    for (const auto& r : result.servers)
        answered -= r.failed_in_round2;
    if (too_slow) {
        result.status = AcquireStatus::too_slow;
        return result;
    }
    if (answered < t.majority())
        return std::unexpected(quorum_error(result.servers));
    result.status = AcquireStatus::held;
    return result;
}

RenewStatus Lock::judge_renewal(Clock::time_point sent, Clock::time_point now) const {
    Tally t = tally();
    if (t.won())
        return now < lock::validity_end(sent, m_ttl) ? RenewStatus::renewed : RenewStatus::failed;
    // Enough servers say the token is gone that a majority can never confirm it.
    if (t.refused())
        return RenewStatus::not_ours;
    if (t.lost() || !redis::any_busy(m_conns))
        return RenewStatus::failed;
    return RenewStatus::pending;
}

void Lock::start_renewal(Clock::time_point now) {
    m_renewing = true;
    m_renew_sent = now;
    // Built at the first renewal, not with every token: most runs end before one.
    if (m_renew_command.empty()) {
        const std::array<std::string, 2> args{m_token, std::to_string(m_ttl.count())};
        const auto keys = script_keys();
        m_renew_command = script_call(renew_script(), true, keys, args);
        m_renew_fallback = script_call(renew_script(), false, keys, args);
    }
    send_all(m_renew_command, m_renew_fallback, now);
}

RenewStatus Lock::poll_renewal(Clock::time_point now) {
    if (!m_renewing)
        return RenewStatus::failed;
    RenewStatus status = judge_renewal(m_renew_sent, now);
    if (status == RenewStatus::pending)
        return status;
    m_last_round = collect();
    for (auto& c : m_conns)
        c.abandon(now);
    m_renewing = false;
    if (status == RenewStatus::renewed) {
        m_validity_end = lock::validity_end(m_renew_sent, m_ttl);
        m_round_trip = now - m_renew_sent;
    }
    return status;
}

void Lock::abandon_renewal(Clock::time_point now) {
    if (!m_renewing)
        return;
    for (auto& c : m_conns)
        c.abandon(now);
    m_last_round = collect();
    m_renewing = false;
}

RenewStatus Lock::extend(Millis ttl, const HistoryRecord* record) {
    m_ttl = ttl;
    // With the release channel: a lease cut short says so to the waiters (scripts.hpp).
    std::vector<std::string> args{m_token, std::to_string(ttl.count()), release_channel(),
                                  m_name.wake};
    auto sent = Clock::now();
    auto keys = script_keys();
    keys.insert(keys.end(), {m_name.waiters, m_name.queue});
    send_all(script_call(renew_script(), true, keys, args),
             script_call(renew_script(), false, keys, args), sent, {},
             record ? history_command(*record) : std::string());
    // Until renewed or refused; a failure waits for every server, so that last_round()
    // says where the token was extended and where it could not be reached.
    (void)redis::wait(m_conns, [&] {
        auto status = judge_renewal(sent, Clock::now());
        return status == RenewStatus::renewed || status == RenewStatus::not_ours;
    });
    auto status = judge_renewal(sent, Clock::now());
    m_last_round = collect();
    if (record)
        note_history();
    if (status == RenewStatus::renewed) {
        m_validity_end = lock::validity_end(sent, ttl);
        m_round_trip = Clock::now() - sent;
    }
    return status == RenewStatus::pending ? RenewStatus::failed : status;
}

std::vector<ServerResult> Lock::release(ReleaseWait until, const std::vector<bool>& only,
                                        const HistoryRecord* record) {
    std::vector<std::string> args{m_token, release_channel(), m_name.wake, "1"};
    if (m_limit > 0) // the permit freed: the waiter woken tries it first
        args.push_back(std::to_string(m_permit));
    auto keys = script_keys();
    keys.insert(keys.end(), {m_name.waiters, m_name.queue});
    // Always EVAL: stragglers are abandoned without waiting for their reply, so the request
    // must work without a NOSCRIPT fallback even on a server whose connection survived a
    // restart unnoticed.
    const Script& script = m_limit == 0 ? k_release_script : k_release_permit_script;
    const std::string after = record ? history_command(*record) : std::string();
    const auto now = Clock::now();
    // The first waiter a release wakes is marked on the wait list, and its next attempt
    // unmarks it: one still marked at the next release is stuck, and is not counted among
    // the two woken (k_wake). Over several servers a woken attempt goes to the leader
    // alone when the leader says "held", so only the leader sees every attempt: marks
    // elsewhere would stay, and each release would tell more waiters. They mark there only
    // while the leader seems down (its waiters then try every server).
    const size_t lead = leader();
    const auto& leader_conn = m_conns[lead];
    const bool leader_up = leader_conn.fd() >= 0 && !leader_conn.busy() && leader_conn.outcome() &&
                           !leader_conn.outcome()->failure;
    if (m_conns.size() == 1 || !leader_up) {
        send_all(script_call(script, false, keys, args), {}, now, only, after);
    } else {
        auto side = [&](bool the_leader) {
            std::vector<bool> to(m_conns.size());
            for (size_t i = 0; i < m_conns.size(); ++i)
                to[i] = (only.empty() || only[i]) && (i == lead) == the_leader;
            return to;
        };
        send_all(script_call(script, false, keys, args), {}, now, side(true), after);
        args[3] = "0"; // no marks
        send_all(script_call(script, false, keys, args), {}, now, side(false), after);
    }
    // Done once a majority answered: a frozen server is not waited on (the key there
    // expires by its TTL; the request, written, runs when it thaws), and a server still
    // being connected to gets its release from a detached process instead of costing us
    // its connect timeout. Without a majority every server is waited for, so that what we
    // report (deleted here, not ours there) is what really happened; the cleanup of a
    // failed attempt reports nothing and stops once a majority cannot answer.
    (void)redis::wait(m_conns, [&] {
        Tally t = tally();
        if (t.yes + t.no < t.majority() && (until == ReleaseWait::every_answer || !t.lost()))
            return false;
        redis::finish_unsent_in_background(m_conns);
        return true;
    });
    auto results = collect();
    if (record)
        note_history(only);
    for (size_t i = 0; i < results.size(); ++i) {
        if (!only.empty() && !only[i]) // what it holds is an earlier round's outcome
            results[i] = ServerResult{.server = results[i].server, .detail = "not asked"};
        else if (results[i].vote == Vote::yes)
            results[i].detail = "released";
    }
    return results;
}

} // namespace redlock::lock
