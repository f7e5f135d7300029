#include "lock/round.hpp"

#include <array>

#include "redis/fanout.hpp"
#include "util/format.hpp"

namespace redlock::lock {

using Vote = ServerResult::Vote;

namespace {

std::string millis_text(Clock::duration d) {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
    return util::format("{:.1f}ms", static_cast<double>(us) / 1000.0);
}

} // namespace

Clock::time_point validity_end(Clock::time_point sent, Millis ttl) {
    // The clock drift allowance of the Redlock spec: 1% of the TTL plus 2 ms.
    auto drift =
        std::chrono::duration_cast<Clock::duration>(ttl) / 100 + std::chrono::milliseconds(2);
    return sent + ttl - drift;
}

// Two server entries whose requests went to one node (a cluster's MOVED, or the master two
// Sentinel entries name) are one lock server listed twice: a majority of them can never be
// won, since the one key there is each entry's vote. Said as a config error, not waited on.
std::optional<util::Error> shared_node(std::span<const redis::Connection> conns) {
    auto node = [](const redis::Connection& c) {
        return c.current_node().empty() ? c.server().url.display() : c.current_node();
    };
    for (size_t i = 0; i < conns.size(); ++i)
        for (size_t j = i + 1; j < conns.size(); ++j)
            if ((!conns[i].current_node().empty() || !conns[j].current_node().empty()) &&
                node(conns[i]) == node(conns[j]))
                return util::Error{
                    util::ErrorKind::config,
                    util::format("servers {} and {} both lead to {} (nodes of one Redis "
                                 "Cluster, or one master named by sentinels): they are one lock "
                                 "server, not two; list one of them, or independent servers",
                                 conns[i].name(), conns[j].name(), node(conns[i]))};
    return std::nullopt;
}

ServerResult classify(const redis::Connection& conn) {
    ServerResult r;
    r.server = conn.name();
    const auto& outcome = conn.outcome();
    if (!outcome) {
        r.detail = "pending";
        return r;
    }
    r.latency = outcome->latency;
    if (outcome->failure) {
        r.vote = Vote::failed;
        r.detail = outcome->failure->detail;
        r.auth_failure = outcome->failure->kind == redis::FailureKind::auth;
        r.abandoned = outcome->failure->kind == redis::FailureKind::abandoned;
        // AUTH (or SELECT) refused: the request pipelined behind it ran all the same, unless
        // its reply says it did not (redis::Connection); a script that answered ran to its
        // end, and left nothing half done.
        r.written = outcome->written;
        r.ran_anyway = outcome->reply && outcome->reply->type == REDIS_REPLY_INTEGER;
        return r;
    }
    const redisReply& reply = *outcome->reply;
    if (redis::is_error(reply)) {
        r.vote = Vote::failed;
        r.detail = std::string(redis::text(reply));
        r.error = redis::error_code(r.detail);
        r.auth_failure = redis::is_auth_error(reply);
        if (r.auth_failure)
            r.detail = redis::describe_refusal(r.detail, conn.server().url.password.has_value());
        // An error from a script may come after it wrote; a refusal before it ran may not.
        r.written = !redis::refused_before_running(redis::text(reply));
    } else if (reply.type == REDIS_REPLY_INTEGER) {
        // 1 (or, from the acquire scripts, a fence) is yes; 0 is no, and so is an acquire
        // script's "held", which carries the holder's PTTL.
        r.vote = reply.integer >= 1 ? Vote::yes : Vote::no;
        r.detail = reply.integer >= 1 ? "ok" : "not ours";
        if (reply.integer < 0) {
            r.held_pttl = held_pttl(reply.integer);
            r.every_permit_held = every_permit_held(reply.integer);
        }
        // replicas = N: the WAIT behind a write says how many replicas have it; with fewer,
        // a failover could lose it, so it does not count.
        const int wanted = conn.server().replicas;
        if (r.vote == Vote::yes && wanted > 0 && !outcome->trailing.empty()) {
            const auto& wait = *outcome->trailing.front();
            if (wait.type != REDIS_REPLY_INTEGER || wait.integer < wanted) {
                r.vote = Vote::failed;
                r.detail = wait.type == REDIS_REPLY_INTEGER
                               ? util::format("written, but only {} of the {} replicas it needs "
                                              "(replicas = {}) acknowledged it in time",
                                              wait.integer, wanted, wanted)
                               : "written, but WAIT failed: " + redis::describe(wait);
            }
        }
    } else {
        r.vote = Vote::failed;
        r.detail = "unexpected reply " + redis::describe(reply);
    }
    return r;
}

std::string script_call(const Script& script, bool by_sha, std::span<const std::string> keys,
                        std::span<const std::string> args, std::span<const std::string> more_args) {
    const auto count = std::to_string(keys.size());
    std::vector<std::string_view> argv;
    argv.reserve(3 + keys.size() + args.size() + more_args.size());
    argv.insert(argv.end(), {by_sha ? "EVALSHA" : "EVAL", by_sha ? script.sha1 : script.source,
                             std::string_view(count)});
    argv.insert(argv.end(), keys.begin(), keys.end());
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), more_args.begin(), more_args.end());
    return redis::encode_command(argv);
}

std::optional<long long> integer_reply(const redis::Connection& conn) {
    const auto& outcome = conn.outcome();
    if (conn.busy() || !outcome || !outcome->reply || outcome->reply->type != REDIS_REPLY_INTEGER)
        return std::nullopt;
    return outcome->reply->integer;
}

std::string script_call(const Script& script, bool by_sha,
                        std::initializer_list<std::string_view> keys,
                        std::initializer_list<std::string_view> args) {
    const auto count = std::to_string(keys.size());
    std::vector<std::string_view> argv{by_sha ? "EVALSHA" : "EVAL",
                                       by_sha ? script.sha1 : script.source, count};
    argv.insert(argv.end(), keys);
    argv.insert(argv.end(), args);
    return redis::encode_command(argv);
}

Tally tally(std::span<const redis::Connection> conns) {
    Tally t;
    t.total = conns.size();
    for (const auto& c : conns) {
        switch (classify(c).vote) {
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

Tally tally_of(const std::vector<ServerResult>& servers) {
    Tally t{servers.size(), 0, 0, 0};
    for (const auto& s : servers) {
        t.yes += s.vote == ServerResult::Vote::yes;
        t.no += s.vote == ServerResult::Vote::no;
        t.failed += s.vote == ServerResult::Vote::failed;
    }
    return t;
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

util::Error quorum_error(const std::vector<ServerResult>& servers) {
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
        return util::Error{kind, causes};
    const size_t needed = majority_of(servers.size());
    if (answered == 0)
        return util::Error{kind, util::format("none of the {} servers answered, {} needed ({})",
                                              servers.size(), needed, causes)};
    return util::Error{kind, util::format("only {} of {} servers answered, {} needed ({})",
                                          answered, servers.size(), needed, causes)};
}

} // namespace redlock::lock
