#include "doctor/doctor.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "doctor/acl.hpp"
#include "doctor/version.hpp"
#include "lock/keys.hpp"
#include "lock/scripts.hpp"
#include "redis/fanout.hpp"
#include "util/format.hpp"
#include "util/random.hpp"

namespace redlock::doctor {

namespace {

using redis::Connection;

const char* k_policies_that_keep_keys = "noeviction";

// INFO replication's role of a replica: "slave" (Redis), "replica".
bool is_replica(std::string_view role) {
    return role == "slave" || role == "replica";
}

// The reply of the last request if it is usable, else records why on the report.
const redisReply* reply_of(const Connection& conn, ServerReport& report) {
    const auto& outcome = conn.outcome();
    if (!outcome || outcome->failure) {
        if (report.reachable || report.error.empty()) {
            report.reachable = false;
            report.error = outcome && outcome->failure ? outcome->failure->detail : "no answer";
            report.auth_error =
                outcome && outcome->failure && outcome->failure->kind == redis::FailureKind::auth;
        }
        return nullptr;
    }
    return outcome->reply.get();
}

// The reply of the last request unless it is an error reply (a refused command).
const redisReply* answer_of(const Connection& conn, ServerReport& report) {
    const redisReply* reply = reply_of(conn, report);
    return reply && !redis::is_error(*reply) ? reply : nullptr;
}

// CONFIG GET NAME answers [NAME, VALUE]; nullopt when the command is refused or renamed.
std::optional<std::string> config_value(const redisReply* reply) {
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2)
        return std::nullopt;
    return std::string(redis::text(*reply->element[1]));
}

// Sends one command to every server still reachable, at once, and waits for them all. A
// server that failed once (timed out, refused us) is not asked again in this run: a frozen
// server costs one timeout, not one per check.
void ask(std::span<Connection> conns, const std::vector<ServerReport>& reports,
         std::span<const std::string_view> argv) {
    const std::string command = redis::encode_command(argv);
    auto now = redis::Clock::now();
    for (size_t i = 0; i < conns.size(); ++i)
        if (reports[i].reachable)
            conns[i].start(command, {}, now);
    (void)redis::wait(conns, [] { return false; });
}

// One reply, kept once the connection has moved on.
struct Answer {
    bool error = false;
    std::string text;
    std::optional<long long> integer;
};

Answer answer(const redisReply& r) {
    Answer a{redis::is_error(r), std::string(redis::text(r)), std::nullopt};
    if (r.type == REDIS_REPLY_INTEGER)
        a.integer = r.integer;
    return a;
}

// As ask, but each server gets its own pipeline of commands (none: not asked), in one
// round trip. The answers in order; none for a server that failed (recorded on its report).
std::vector<std::vector<Answer>> ask_pipelines(std::span<Connection> conns,
                                               std::vector<ServerReport>& reports,
                                               const std::vector<std::vector<Argv>>& pipelines) {
    std::vector<bool> asked(conns.size());
    auto now = redis::Clock::now();
    for (size_t i = 0; i < conns.size(); ++i) {
        if (!reports[i].reachable || pipelines[i].empty())
            continue;
        std::string command;
        for (const auto& argv : pipelines[i]) {
            std::vector<std::string_view> parts(argv.begin(), argv.end());
            command += redis::encode_command(parts);
        }
        conns[i].start_pipelined(std::move(command), pipelines[i].size() - 1, now);
        asked[i] = true;
    }
    (void)redis::wait(conns, [] { return false; });
    std::vector<std::vector<Answer>> answers(conns.size());
    for (size_t i = 0; i < conns.size(); ++i) {
        if (!asked[i])
            continue;
        const auto* first = reply_of(conns[i], reports[i]);
        if (!first)
            continue;
        answers[i].push_back(answer(*first));
        for (const auto& r : conns[i].outcome()->trailing)
            answers[i].push_back(answer(*r));
        if (answers[i].size() != pipelines[i].size())
            answers[i].clear();
    }
    return answers;
}

// The ACL refusals among the answers to `probes`.
void collect_refusals(const std::vector<AclProbe>& probes, const std::vector<Answer>& answers,
                      bool dryrun, std::vector<AclFinding>& findings) {
    for (size_t j = 0; j < probes.size() && j < answers.size(); ++j) {
        const auto& a = answers[j];
        if (dryrun ? a.text == "OK" : !a.error)
            continue;
        if (auto refusal = parse_acl_refusal(a.text))
            findings.push_back({&probes[j], *refusal});
        else if (dryrun) // a refusal in words we do not know: the command, unnamed
            findings.push_back({&probes[j], {AclRefusal::Kind::command, {}}});
    }
}

// The probe scripts that failed for want of a command or option the server lacks (an
// older server than they were written for): what that costs, and the server's words.
void collect_lacking(const std::vector<AclProbe>& probes, const std::vector<Answer>& answers,
                     std::span<const AclFeature> features, std::vector<std::string>& lacking) {
    for (size_t j = 0; j < probes.size() && j < answers.size(); ++j) {
        if (probes[j].calls.empty() || !answers[j].error || !lacks_command(answers[j].text))
            continue;
        auto said = util::format("{}: {}", features[probes[j].feature].without, answers[j].text);
        if (std::ranges::find(lacking, said) == lacking.end())
            lacking.push_back(std::move(said));
    }
}

std::string upper_name(std::string_view name) {
    std::string out;
    for (char c : name)
        out.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
    return out;
}

// The last `direct` findings are refusals of commands sent alone: where they name a
// command that a refused script calls, they replace that script's "one of" with it.
void narrow_script_refusals(std::vector<AclFinding>& findings, size_t direct) {
    const size_t first_direct = findings.size() >= direct ? findings.size() - direct : 0;
    std::vector<AclFinding> out;
    std::vector<AclFinding> named;
    for (size_t j = first_direct; j < findings.size(); ++j)
        if (findings[j].refusal.kind == AclRefusal::Kind::command)
            named.push_back(findings[j]);
    for (size_t j = 0; j < first_direct; ++j) {
        const auto& f = findings[j];
        bool explained = false;
        if (f.refusal.kind == AclRefusal::Kind::command && f.refusal.name.empty())
            for (const auto& d : named)
                for (auto call : f.probe->calls)
                    if (call == d.refusal.name) {
                        out.push_back({f.probe, d.refusal});
                        explained = true;
                    }
        if (!explained)
            out.push_back(f);
    }
    findings = std::move(out);
}

// The acl check: every command redlock sends, asked of the server with ACL DRYRUN for the
// configured user where it allows that, else tried on a probe lock (see doctor/acl.hpp).
// Sent last: the probing ends with a SUBSCRIBE.
void check_acl(std::span<Connection> conns, std::vector<ServerReport>& reports,
               std::string_view prefix, std::span<const ServerVersion> versions) {
    const size_t n = conns.size();
    const ProbeKeys keys(prefix);
    std::vector<std::string> users(n);
    std::vector<std::vector<AclProbe>> dryrun(n);
    std::vector<std::vector<Argv>> pipelines(n);
    for (size_t i = 0; i < n; ++i) {
        if (!reports[i].reachable)
            continue;
        // AUTH with a password alone authenticates as "default".
        users[i] = conns[i].server().url.username.value_or("default");
        dryrun[i] = acl_dryrun_probes(keys, conns[i].server());
        for (const auto& p : dryrun[i]) {
            Argv argv{"ACL", "DRYRUN", users[i]};
            argv.insert(argv.end(), p.argv.begin(), p.argv.end());
            pipelines[i].push_back(std::move(argv));
        }
    }
    auto answers = ask_pipelines(conns, reports, pipelines);

    std::vector<std::vector<AclFinding>> findings(n);
    std::vector<bool> probing(n);
    for (size_t i = 0; i < n; ++i) {
        if (!reports[i].reachable || answers[i].empty())
            continue;
        // An error reply is DRYRUN itself refused (NOPERM), unknown (Redis 6), or the user
        // unknown by that name: try the commands instead, but not on a replica, which
        // refuses the probe lock's writes (its replication risk comes first).
        probing[i] = std::ranges::any_of(answers[i], [](const Answer& a) { return a.error; });
        if (probing[i] && is_replica(reports[i].role)) {
            probing[i] = false;
            reports[i].acl = Check{"acl", Level::note,
                                   "not checked: ACL DRYRUN is not allowed, and a replica "
                                   "refuses the probe lock's writes"};
        } else if (!probing[i])
            collect_refusals(dryrun[i], answers[i], true, findings[i]);
    }

    const std::string token = util::random_token();
    std::vector<std::vector<AclProbe>> round1(n), round2(n), subscribe(n);
    auto probe_round = [&](std::vector<std::vector<AclProbe>>& probes, auto make,
                           size_t trailing_unsubscribe) {
        std::vector<std::vector<Argv>> pipes(n);
        for (size_t i = 0; i < n; ++i) {
            if (!probing[i] || !reports[i].reachable)
                continue;
            probes[i] = make(i);
            for (const auto& p : probes[i])
                pipes[i].push_back(p.argv);
            if (trailing_unsubscribe > 0)
                pipes[i].push_back({"UNSUBSCRIBE", keys.wake_channel});
        }
        auto got = ask_pipelines(conns, reports, pipes);
        for (size_t i = 0; i < n; ++i)
            if (probing[i]) {
                collect_refusals(probes[i], got[i], false, findings[i]);
                collect_lacking(probes[i], got[i], acl_features(conns[i].server()),
                                reports[i].lacking);
            }
        return got;
    };
    auto first = probe_round(
        round1,
        [&](size_t i) {
            const auto& v = versions[i].redis;
            return acl_probe_round1(keys, conns[i].server(), token, v && *v < std::pair{7, 0});
        },
        0);
    (void)probe_round(
        round2,
        [&](size_t i) {
            long long fence = !first[i].empty() && first[i][0].integer ? *first[i][0].integer : 1;
            return acl_probe_round2(keys, token, fence);
        },
        0);
    // A script refused one of its commands without saying which. Queued inside MULTI
    // (where the ACL is checked as each is queued) and then discarded, each of them
    // names itself without running; without MULTI the verdict names the script's list.
    std::vector<std::vector<AclProbe>> direct(n);
    std::vector<std::vector<Argv>> multi(n);
    for (size_t i = 0; i < n; ++i) {
        if (!probing[i])
            continue;
        for (const auto& f : findings[i]) {
            if (f.refusal.kind != AclRefusal::Kind::command || !f.refusal.name.empty())
                continue;
            for (auto call : f.probe->calls) {
                auto it = std::ranges::find_if(dryrun[i], [&](const AclProbe& p) {
                    return p.argv.front() == upper_name(call);
                });
                if (it != dryrun[i].end() && std::ranges::none_of(direct[i], [&](const auto& d) {
                        return d.argv.front() == it->argv.front();
                    }))
                    direct[i].push_back(*it);
            }
        }
        if (!direct[i].empty())
            multi[i].push_back({"MULTI"});
    }
    auto in_multi = ask_pipelines(conns, reports, multi);
    std::vector<std::vector<Argv>> queued(n);
    for (size_t i = 0; i < n; ++i) {
        if (in_multi[i].empty() || in_multi[i][0].error) {
            direct[i].clear();
            continue;
        }
        for (const auto& p : direct[i])
            queued[i].push_back(p.argv);
        queued[i].push_back({"DISCARD"});
    }
    auto got = ask_pipelines(conns, reports, queued);
    for (size_t i = 0; i < n; ++i) {
        const size_t before = findings[i].size();
        collect_refusals(direct[i], got[i], false, findings[i]);
        narrow_script_refusals(findings[i], findings[i].size() - before);
    }

    // Last: a refused UNSUBSCRIBE would leave the connection subscribed.
    (void)probe_round(
        subscribe, [&](size_t) { return std::vector<AclProbe>{acl_subscribe_probe(keys)}; }, 1);

    for (size_t i = 0; i < n; ++i) {
        if (!reports[i].reachable || reports[i].acl || (answers[i].empty() && !probing[i]))
            continue;
        const auto features = acl_features(conns[i].server());
        reports[i].acl = acl_verdict(
            users[i],
            probing[i] ? util::format("probed on {}: ACL DRYRUN is not allowed", keys.lock)
                       : std::string("checked with ACL DRYRUN"),
            features, findings[i], keys);
    }
}

void config_get(std::span<Connection> conns, std::vector<ServerReport>& reports,
                std::string_view name, std::optional<std::string> ServerReport::*field) {
    std::array<std::string_view, 3> argv{"CONFIG", "GET", name};
    ask(conns, reports, argv);
    for (size_t i = 0; i < conns.size(); ++i)
        if (reports[i].reachable)
            reports[i].*field = config_value(reply_of(conns[i], reports[i]));
}

void judge(ServerReport& r, std::chrono::milliseconds ttl, const config::ServerConfig& server) {
    // Eviction: lock keys carry a TTL, so volatile-* policies pick them as readily as
    // allkeys-* ones. Only noeviction keeps them.
    if (!r.maxmemory_policy) {
        r.checks.push_back({"eviction", Level::note,
                            "cannot read maxmemory-policy (CONFIG refused); make sure it is "
                            "noeviction"});
    } else if (*r.maxmemory_policy == k_policies_that_keep_keys) {
        r.checks.push_back({"eviction", Level::ok, "maxmemory-policy noeviction"});
    } else {
        std::string limit = r.maxmemory && *r.maxmemory > 0
                                ? util::format("maxmemory is {} bytes", *r.maxmemory)
                                : std::string("no maxmemory limit is set yet, but one may be");
        r.checks.push_back(
            {"eviction", Level::risk,
             util::format("maxmemory-policy {} can evict lock keys when memory runs out ({}); "
                          "set maxmemory-policy noeviction",
                          *r.maxmemory_policy, limit)});
    }

    if (r.role.empty())
        r.checks.push_back({"replication", Level::note,
                            "cannot read the replication role (INFO refused); make sure this "
                            "server is an independent master"});
    else if (is_replica(r.role))
        r.checks.push_back({"replication", Level::risk,
                            "this server is a replica: lock writes are refused or lost; point "
                            "redlock at independent masters"});
    else if (server.replicas > r.replicas)
        r.checks.push_back(
            {"replication", Level::risk,
             util::format("replicas = {}, but the master has {} replica{} connected: no lock "
                          "write can count here",
                          server.replicas, r.replicas, r.replicas == 1 ? "" : "s")});
    else if (server.replicas > 0)
        r.checks.push_back(
            {"replication", Level::note,
             util::format("master with {} replica{}; replicas = {}: a lock write counts only "
                          "once that many have it (WAIT), which narrows the failover window "
                          "but does not close it (WAIT does not make a write durable)",
                          r.replicas, r.replicas == 1 ? "" : "s", server.replicas)});
    else if (r.replicas > 0)
        r.checks.push_back(
            {"replication", Level::risk,
             util::format("master with {} replica{}: a failover can promote a replica that "
                          "never saw a lock and hand it to a second holder; set replicas = "
                          "{} so that each lock write waits for them",
                          r.replicas, r.replicas == 1 ? "" : "s", r.replicas)});
    else
        r.checks.push_back({"replication", Level::ok, "master without replicas"});

    double allowance = static_cast<double>(ttl.count()) / 100.0 + 2.0;
    if (!r.clock_offset_ms)
        r.checks.push_back({"clock", Level::note, "cannot read the server's TIME"});
    else if (std::fabs(*r.clock_offset_ms) > allowance)
        r.checks.push_back(
            {"clock", Level::risk,
             util::format("clock offset {:+.1f}ms exceeds the drift allowance of {:.1f}ms for a "
                          "{}ms ttl; synchronise clocks (NTP)",
                          *r.clock_offset_ms, allowance, ttl.count())});
    else
        r.checks.push_back({"clock", Level::ok,
                            util::format("clock offset {:+.1f}ms (allowance {:.1f}ms)",
                                         *r.clock_offset_ms, allowance)});

    if (!r.appendonly)
        r.checks.push_back({"persistence", Level::note, "cannot read appendonly (CONFIG refused)"});
    else if (*r.appendonly == "yes" && r.appendfsync == "always")
        r.checks.push_back({"persistence", Level::ok,
                            "appendonly yes, appendfsync always: locks and fence counters "
                            "survive a restart"});
    else if (*r.appendonly == "yes")
        r.checks.push_back(
            {"persistence", Level::note,
             util::format("appendonly yes, appendfsync {}: a crash can lose the last locks "
                          "and fence counters written; use appendfsync always, or restart this "
                          "server only after the longest lock ttl has passed (fences can still "
                          "repeat if a majority loses its counters)",
                          r.appendfsync.value_or("unknown"))});
    else
        r.checks.push_back({"persistence", Level::note,
                            "appendonly no: a restart forgets every lock and fence counter; "
                            "restart this server only after the longest lock ttl has passed, "
                            "and never a majority of the servers empty (fences would repeat), "
                            "or enable appendonly yes with appendfsync always"});

    if (!r.scripts_ok)
        r.checks.push_back({"scripts", Level::risk,
                            "lock scripts cannot run (is EVAL, and every command the scripts "
                            "call, allowed for this user?): " +
                                r.error});
    else if (!r.evalsha_refused.empty())
        r.checks.push_back({"scripts", Level::note,
                            "EVALSHA is refused (" + r.evalsha_refused +
                                "): redlock sends every script with EVAL instead"});
    else
        r.checks.push_back({"scripts", Level::ok, "lock scripts run (EVAL and EVALSHA)"});
}

} // namespace

const char* level_name(Level level) {
    switch (level) {
    case Level::ok:
        return "ok";
    case Level::note:
        return "note";
    case Level::risk:
        break;
    }
    return "risk";
}

std::vector<ServerReport> examine(std::span<Connection> conns, std::chrono::milliseconds ttl,
                                  std::string_view prefix) {
    std::vector<ServerReport> reports(conns.size());
    for (size_t i = 0; i < conns.size(); ++i) {
        reports[i].server = conns[i].name();
        reports[i].reachable = true;
    }

    // Round-trip latency: the median of a few PINGs (the first one also connects).
    std::array<std::string_view, 1> ping{"PING"};
    ask(conns, reports, ping);
    for (size_t i = 0; i < conns.size(); ++i)
        (void)reply_of(conns[i], reports[i]); // records a failure: not asked again
    std::vector<std::vector<double>> samples(conns.size());
    for (int n = 0; n < 5; ++n) {
        ask(conns, reports, ping);
        for (size_t i = 0; i < conns.size(); ++i) {
            const auto* r = reply_of(conns[i], reports[i]);
            if (r && redis::is_error(*r) && reports[i].reachable) {
                // Refused (ACL, NOAUTH): nothing else will be answered either.
                reports[i].reachable = false;
                reports[i].auth_error = redis::is_auth_error(*r);
                reports[i].error = std::string(redis::text(*r));
            }
            if (r && !redis::is_error(*r))
                samples[i].push_back(
                    std::chrono::duration<double, std::milli>(conns[i].outcome()->latency).count());
        }
    }
    for (size_t i = 0; i < conns.size(); ++i) {
        auto& s = samples[i];
        if (s.empty())
            continue;
        std::ranges::sort(s);
        reports[i].latency_ms = s[s.size() / 2];
    }

    std::array<std::string_view, 2> info_server{"INFO", "server"};
    ask(conns, reports, info_server);
    std::vector<ServerVersion> versions(conns.size());
    for (size_t i = 0; i < conns.size(); ++i)
        if (const auto* r = answer_of(conns[i], reports[i])) {
            versions[i] = server_version(redis::text(*r));
            reports[i].software = versions[i].name;
            reports[i].version = versions[i].version;
        }

    std::array<std::string_view, 2> info_repl{"INFO", "replication"};
    ask(conns, reports, info_repl);
    for (size_t i = 0; i < conns.size(); ++i)
        if (const auto* r = answer_of(conns[i], reports[i])) {
            reports[i].role = info_field(redis::text(*r), "role");
            reports[i].replicas =
                std::strtol(info_field(redis::text(*r), "connected_slaves").c_str(), nullptr, 10);
        }

    std::array<std::string_view, 2> info_cluster{"INFO", "cluster"};
    ask(conns, reports, info_cluster);
    for (size_t i = 0; i < conns.size(); ++i)
        if (const auto* r = answer_of(conns[i], reports[i]))
            reports[i].cluster = info_field(redis::text(*r), "cluster_enabled") == "1";

    config_get(conns, reports, "maxmemory-policy", &ServerReport::maxmemory_policy);
    {
        std::array<std::string_view, 3> argv{"CONFIG", "GET", "maxmemory"};
        ask(conns, reports, argv);
        for (size_t i = 0; i < conns.size(); ++i)
            if (reports[i].reachable)
                if (auto v = config_value(reply_of(conns[i], reports[i])))
                    reports[i].maxmemory = std::strtoll(v->c_str(), nullptr, 10);
    }
    config_get(conns, reports, "appendonly", &ServerReport::appendonly);
    config_get(conns, reports, "appendfsync", &ServerReport::appendfsync);

    // Clock offset: the server's TIME against the midpoint of our request's round trip.
    std::array<std::string_view, 1> time{"TIME"};
    auto before = std::chrono::system_clock::now();
    ask(conns, reports, time);
    for (size_t i = 0; i < conns.size(); ++i) {
        const auto* r = reply_of(conns[i], reports[i]);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2)
            continue;
        double server_us =
            std::strtod(std::string(redis::text(*r->element[0])).c_str(), nullptr) * 1e6 +
            std::strtod(std::string(redis::text(*r->element[1])).c_str(), nullptr);
        auto midpoint = before + conns[i].outcome()->latency / 2;
        double local_us = static_cast<double>(
            std::chrono::duration_cast<std::chrono::microseconds>(midpoint.time_since_epoch())
                .count());
        double offset = (server_us - local_us) / 1000.0;
        // Shown to 0.1 ms: an offset that rounds to zero is +0.0, never -0.0.
        reports[i].clock_offset_ms = std::abs(offset) < 0.05 ? 0.0 : offset;
    }

    // What run sends: EVAL (a server's first contact, every release) and EVALSHA (after),
    // of a real lock script on a probe key under the prefix, so the ACL's key patterns
    // and the commands the script calls are checked too. The probe only reads.
    for (auto& r : reports)
        r.scripts_ok = r.reachable;
    const lock::Keys keys(prefix, "redlock-doctor-probe");
    const std::string& probe = keys.lock;
    const std::string& probe_meta = keys.meta;
    const std::string& probe_record = keys.record;
    for (bool by_sha : {false, true}) {
        std::array<std::string_view, 7> argv{by_sha ? "EVALSHA" : "EVAL",
                                             by_sha ? lock::k_inspect_script.sha1
                                                    : lock::k_inspect_script.source,
                                             "3",
                                             probe,
                                             probe_meta,
                                             probe_record,
                                             keys.fence_field};
        ask(conns, reports, argv);
        for (size_t i = 0; i < conns.size(); ++i) {
            if (!reports[i].scripts_ok)
                continue;
            const auto* r = reply_of(conns[i], reports[i]);
            if (!r)
                continue;
            if (!redis::is_error(*r))
                continue;
            if (by_sha) {
                reports[i].evalsha_refused = std::string(redis::text(*r));
            } else {
                reports[i].scripts_ok = false;
                if (reports[i].error.empty())
                    reports[i].error = redis::describe(*r);
            }
        }
    }

    check_acl(conns, reports, prefix, versions);

    for (size_t i = 0; i < reports.size(); ++i) {
        auto& r = reports[i];
        if (!r.reachable)
            continue;
        r.checks.push_back(version_check(versions[i], r.lacking));
        judge(r, ttl, conns[i].server());
        if (r.acl)
            r.checks.push_back(*r.acl);
        const auto& server = conns[i].server();
        if (server.url.is_sentinel())
            r.checks.push_back({"sentinel", Level::ok,
                                util::format("master {}, named by the sentinels for '{}'",
                                             conns[i].current_node(), server.url.master_name)});
        if (r.cluster)
            r.checks.push_back(
                {"cluster", Level::note,
                 "a Redis Cluster node: a lock lives on the master of its slot, which may be "
                 "another node; these checks are of this node (run doctor -s on each master)"});
        // How the connection is protected: TLS verified, TLS unverified, or none.
        if (!server.url.tls)
            r.checks.push_back(
                {"tls", Level::ok, server.url.is_unix() ? "unix socket" : "plain TCP (redis://)"});
        else if (!server.tls.verify)
            r.checks.push_back({"tls", Level::note,
                                "TLS without verification (tls_verify = false): anyone on the "
                                "path can pose as this server"});
        else
            r.checks.push_back(
                {"tls", Level::ok,
                 util::format("TLS, certificate verified for '{}'", server.tls.server_name.empty()
                                                                        ? server.url.host
                                                                        : server.tls.server_name)});
    }
    return reports;
}

} // namespace redlock::doctor
