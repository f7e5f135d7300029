#include "lock/lock.hpp"
#include "util/format.hpp"

#include <array>

#include "redis/fanout.hpp"

namespace redlock::lock {

using redis::encode_command;
using Vote = ServerResult::Vote;

Clock::time_point validity_end(Clock::time_point sent, Millis ttl) {
    // The clock drift allowance of the Redlock spec: 1% of the TTL plus 2 ms.
    auto drift = std::chrono::duration_cast<Clock::duration>(ttl) / 100 + std::chrono::milliseconds(2);
    return sent + ttl - drift;
}

namespace {

std::string millis_text(Clock::duration d) {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
    return util::format("{:.1f}ms", static_cast<double>(us) / 1000.0);
}

// How a reply counts for the kind of round: SET NX answers OK or nil; the scripts answer
// 1 (done) or 0 (not our token).
ServerResult classify(const redis::Connection& conn, bool integer_reply) {
    ServerResult r;
    r.server = conn.name();
    const auto& outcome = conn.outcome();
    if (!outcome) {
        r.vote = Vote::none;
        r.detail = "pending";
        return r;
    }
    r.latency = outcome->latency;
    if (outcome->failure) {
        r.vote = Vote::failed;
        r.detail = outcome->failure->detail;
        r.auth_failure = outcome->failure->kind == redis::FailureKind::auth;
        return r;
    }
    const redisReply& reply = *outcome->reply;
    if (redis::is_error(reply)) {
        r.vote = Vote::failed;
        r.detail = std::string(redis::text(reply));
        r.auth_failure = redis::is_auth_error(reply);
    } else if (integer_reply && reply.type == REDIS_REPLY_INTEGER) {
        r.vote = reply.integer == 1 ? Vote::yes : Vote::no;
        r.detail = reply.integer == 1 ? "ok" : "not our token";
    } else if (!integer_reply && reply.type == REDIS_REPLY_STATUS && redis::text(reply) == "OK") {
        r.vote = Vote::yes;
        r.detail = "ok";
    } else if (!integer_reply && reply.type == REDIS_REPLY_NIL) {
        r.vote = Vote::no;
        r.detail = "held by another owner";
    } else {
        r.vote = Vote::failed;
        r.detail = "unexpected reply " + redis::describe(reply);
    }
    return r;
}

std::string script_call(std::string_view verb, std::string_view script_or_sha, std::string_view key,
                        std::string_view token, std::string_view extra) {
    if (extra.empty()) {
        std::array<std::string_view, 5> argv{verb, script_or_sha, "1", key, token};
        return encode_command(argv);
    }
    std::array<std::string_view, 6> argv{verb, script_or_sha, "1", key, token, extra};
    return encode_command(argv);
}

} // namespace

Lock::Lock(const std::vector<config::ServerConfig>& servers, std::string key, std::string token,
           Millis ttl)
    : m_key(std::move(key)), m_token(std::move(token)), m_ttl(ttl) {
    m_conns.reserve(servers.size());
    for (const auto& s : servers)
        m_conns.emplace_back(s);
    auto ttl_ms = std::to_string(m_ttl.count());
    m_renew_command = script_call("EVALSHA", k_renew_sha, m_key, m_token, ttl_ms);
    m_renew_fallback = script_call("EVAL", k_renew_script, m_key, m_token, ttl_ms);
}

void Lock::send_all(const std::string& command, const std::string& fallback,
                    Clock::time_point now) {
    for (auto& c : m_conns)
        c.start(command, fallback, now);
}

Tally Lock::tally(bool integer_reply) const {
    Tally t;
    t.total = m_conns.size();
    for (const auto& c : m_conns) {
        switch (classify(c, integer_reply).vote) {
        case Vote::yes:
            ++t.yes;
            break;
        case Vote::no:
            ++t.no;
            break;
        case Vote::failed:
            ++t.failed;
            break;
        case Vote::none:
            break;
        }
    }
    return t;
}

std::vector<ServerResult> Lock::collect(bool integer_reply) const {
    std::vector<ServerResult> out;
    out.reserve(m_conns.size());
    for (const auto& c : m_conns)
        out.push_back(classify(c, integer_reply));
    return out;
}

util::Expected<AcquireResult> Lock::acquire(int interrupt_fd) {
    auto ttl_ms = std::to_string(m_ttl.count());
    std::array<std::string_view, 6> argv{"SET", m_key, m_token, "NX", "PX", ttl_ms};
    auto command = encode_command(argv);

    auto sent = Clock::now();
    send_all(command, {}, sent);
    auto waited = redis::wait(m_conns, [this] { return tally(false).decided(); }, interrupt_fd);
    auto done = Clock::now();

    AcquireResult result;
    result.elapsed = done - sent;
    result.servers = collect(false);
    Tally t = tally(false);
    if (waited == redis::WaitResult::decided && t.won() && done < lock::validity_end(sent, m_ttl)) {
        result.status = AcquireStatus::acquired;
        result.validity_end = m_validity_end = lock::validity_end(sent, m_ttl);
        return result;
    }

    // Not acquired. Servers that said "held" cannot have our token; every other one might
    // (a yes, or a SET that landed after we stopped listening), so release there.
    bool any_to_release = false;
    for (const auto& r : result.servers)
        any_to_release |= r.vote != Vote::no;
    if (any_to_release)
        release();
    if (waited == redis::WaitResult::interrupted) {
        result.status = AcquireStatus::interrupted;
        return result;
    }
    if (t.yes + t.no < t.majority())
        return std::unexpected(quorum_error(util::format("cannot lock '{}'", m_key), result.servers));
    result.status = AcquireStatus::held;
    return result;
}

void Lock::start_renewal(Clock::time_point now) {
    m_renewing = true;
    m_renew_sent = now;
    send_all(m_renew_command, m_renew_fallback, now);
}

RenewStatus Lock::poll_renewal(Clock::time_point now) {
    if (!m_renewing)
        return RenewStatus::failed;
    Tally t = tally(true);
    RenewStatus status = RenewStatus::pending;
    if (t.won())
        status = now < lock::validity_end(m_renew_sent, m_ttl) ? RenewStatus::renewed
                                                         : RenewStatus::failed;
    else if (t.no > t.total - t.majority())
        status = RenewStatus::not_ours;
    else if (t.lost() || !redis::any_busy(m_conns))
        status = RenewStatus::failed;
    if (status == RenewStatus::pending)
        return status;
    m_last_round = collect(true);
    for (auto& c : m_conns)
        c.abandon(now);
    m_renewing = false;
    if (status == RenewStatus::renewed)
        m_validity_end = lock::validity_end(m_renew_sent, m_ttl);
    return status;
}

void Lock::abandon_renewal(Clock::time_point now) {
    if (!m_renewing)
        return;
    for (auto& c : m_conns)
        c.abandon(now);
    m_last_round = collect(true);
    m_renewing = false;
}

std::vector<ServerResult> Lock::release() {
    auto command = script_call("EVALSHA", k_release_sha, m_key, m_token, {});
    auto fallback = script_call("EVAL", k_release_script, m_key, m_token, {});
    send_all(command, fallback, Clock::now());
    (void)redis::wait(m_conns, [this] {
        Tally t = tally(true);
        return t.yes + t.no >= t.majority() || t.lost();
    });
    return collect(true);
}

std::string describe_round(const std::vector<ServerResult>& servers) {
    std::string out;
    for (const auto& s : servers) {
        if (!out.empty())
            out += ", ";
        out += util::format("{} {}", s.server, s.detail);
        if (s.vote != Vote::none)
            out += " " + millis_text(s.latency);
    }
    return out;
}

util::Error quorum_error(std::string_view what, const std::vector<ServerResult>& servers) {
    bool auth = false;
    size_t answered = 0;
    std::string causes;
    for (const auto& s : servers) {
        if (s.vote == Vote::yes || s.vote == Vote::no) {
            ++answered;
            continue;
        }
        auth |= s.auth_failure;
        if (!causes.empty())
            causes += "; ";
        causes += s.server + ": " + s.detail;
    }
    auto kind = auth ? util::ErrorKind::auth : util::ErrorKind::unavailable;
    if (servers.size() == 1)
        return util::Error{kind, util::format("{}: {}", what, causes)};
    return util::Error{kind, util::format("{}: only {} of {} servers answered, {} needed ({})", what,
                                         answered, servers.size(), servers.size() / 2 + 1, causes)};
}

} // namespace redlock::lock

