#include "lock/inspect.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <map>
#include <set>

#include "lock/history.hpp"
#include "lock/keys.hpp"
#include "lock/name.hpp"
#include "lock/quorum.hpp"
#include "lock/round.hpp"
#include "lock/scripts.hpp"
#include "redis/fanout.hpp"
#include "util/format.hpp"
#include "util/timestamp.hpp"

namespace redlock::lock {

namespace {

std::optional<long long> number_field(const std::map<std::string, std::string>& fields,
                                      const char* name) {
    auto it = fields.find(name);
    if (it == fields.end() || it->second.empty())
        return std::nullopt;
    char* end = nullptr;
    errno = 0;
    long long value = std::strtoll(it->second.c_str(), &end, 10);
    if (errno != 0 || *end != '\0')
        return std::nullopt;
    return value;
}

// A slot record as k_claim_slot_script writes it; nullopt when absent or not one: its
// times (the slot's start, slot * slot_ms, included) are on the servers' clock, so one
// past util::plausible_ms was not written by a run.
std::optional<LastRun> parse_last_run(std::map<std::string, std::string> fields) {
    auto slot = util::plausible_ms(number_field(fields, "slot"));
    auto slot_ms = util::plausible_ms(number_field(fields, "slot_ms"));
    auto started = util::plausible_ms(number_field(fields, "started_ms"));
    auto ended = number_field(fields, "ended_ms");
    if (!slot || !slot_ms || !started || *slot_ms <= 0 || *slot > util::k_max_unix_ms / *slot_ms ||
        (ended && !util::plausible_ms(*ended)))
        return std::nullopt;
    LastRun run;
    run.slot = *slot;
    run.slot_ms = *slot_ms;
    run.started_ms = *started;
    run.ended_ms = ended;
    if (auto status = number_field(fields, "status"); status && *status >= 0 && *status <= 255)
        run.status = static_cast<int>(*status);
    if (auto who = parse_holder(fields, fields["token"]))
        run.who = *who;
    if (auto error = fields.find("start_error"); error != fields.end())
        run.start_error = error->second;
    return run;
}

} // namespace

std::optional<CronRecord> parse_cron_record(const std::map<std::string, std::string>& fields) {
    auto slot = util::plausible_ms(number_field(fields, "c"));
    if (!slot)
        return std::nullopt;
    CronRecord r;
    r.slot_ms = *slot;
    auto text = [&](const char* name) {
        auto it = fields.find(name);
        return it == fields.end() ? std::string() : it->second;
    };
    r.state = text("cs");
    r.next_ms = util::plausible_ms(number_field(fields, "cn"));
    if (r.next_ms && *r.next_ms == 0)
        r.next_ms.reset();
    r.schedule = text("cw");
    r.zone = text("cz");
    r.skipped_ms = util::plausible_ms(number_field(fields, "ck"));
    r.started_ms = util::plausible_ms(number_field(fields, "cb"));
    r.ended_ms = util::plausible_ms(number_field(fields, "ce"));
    if (auto status = number_field(fields, "cx"); status && *status >= 0 && *status <= 255)
        r.status = static_cast<int>(*status);
    r.host = text("ch");
    return r;
}

namespace {

// Fills reachability and error from a connection's outcome; returns the reply if usable.
const redisReply* read_outcome(const redis::Connection& conn, ServerView& view) {
    view.server = conn.name();
    const auto& outcome = conn.outcome();
    if (!outcome) {
        view.error = "no answer";
        return nullptr;
    }
    if (outcome->failure) {
        view.error = outcome->failure->detail;
        view.auth_error = outcome->failure->kind == redis::FailureKind::auth;
        return nullptr;
    }
    if (redis::is_error(*outcome->reply)) {
        view.error = std::string(redis::text(*outcome->reply));
        view.auth_error = redis::is_auth_error(*outcome->reply);
        return nullptr;
    }
    view.reachable = true;
    return outcome->reply.get();
}

// A WRONGTYPE error from the inspect script: the lock key holds something other than a
// string. That server answered; what it has is simply not a lock.
bool is_wrong_type(const redis::Connection& conn) {
    const auto& outcome = conn.outcome();
    return outcome && !outcome->failure && outcome->reply && redis::is_error(*outcome->reply) &&
           redis::error_code(redis::text(*outcome->reply)) == redis::ErrorCode::wrongtype;
}

// A key's PTTL as shown and used: -1 (no expiry), -2 (none), or at most a century, so that a
// deadline on steady_clock (nanoseconds: 292 years) drawn from it cannot overflow.
long long plausible_pttl(long long pttl) {
    constexpr long long k_century_ms = 100LL * 365 * 24 * 3600 * 1000;
    return std::clamp(pttl, -2LL, k_century_ms);
}

// A SCAN cursor is an unsigned decimal number; anything else is a protocol error.
bool is_cursor(std::string_view text) {
    return !text.empty() && text.size() <= 20 &&
           std::ranges::all_of(text, [](char c) { return c >= '0' && c <= '9'; });
}

} // namespace

bool tells_more(const LastRun& a, const LastRun& b) {
    if (a.slot != b.slot)
        return a.slot > b.slot;
    // The same run written to several servers: its holder fields are the client's own.
    const bool same_run = a.who.host == b.who.host && a.who.pid == b.who.pid &&
                          a.who.acquired_at == b.who.acquired_at;
    if (same_run) {
        auto ended = [](const LastRun& r) { return r.ended_ms || r.start_error; };
        return ended(a) && !ended(b);
    }
    return a.started_ms > b.started_ms;
}

const char* state_name(LockState state) {
    switch (state) {
    case LockState::free:
        return "free";
    case LockState::held:
        return "held";
    case LockState::unknown:
        break;
    }
    return "unknown";
}

void read_inspect_reply(const redisReply& reply, ServerView& sv) {
    const redisReply* token = reply.element[0];
    const redisReply* fence = reply.element[3];
    read_server_view(
        token->type == REDIS_REPLY_STRING ? std::optional<std::string>(redis::text(*token))
                                          : std::nullopt,
        reply.element[1]->type == REDIS_REPLY_INTEGER ? reply.element[1]->integer : -2,
        redis::hash_fields(*reply.element[2]),
        fence->type == REDIS_REPLY_STRING ? std::optional<std::string_view>(redis::text(*fence))
                                          : std::nullopt,
        redis::hash_fields(*reply.element[4]), sv);
}

void read_server_view(std::optional<std::string> token, long long pttl,
                      const std::map<std::string, std::string>& meta,
                      std::optional<std::string_view> fence,
                      std::map<std::string, std::string> slot, ServerView& sv) {
    sv.reachable = true;
    if (fence)
        sv.fence = std::strtoll(std::string(*fence).c_str(), nullptr, 10);
    sv.cron = parse_cron_record(slot);
    sv.last_run = parse_last_run(std::move(slot));
    if (!token)
        return;
    sv.token = std::move(token);
    sv.ttl_ms = plausible_pttl(pttl);
    const auto owner = meta.find("token");
    if (auto it = meta.find("fence");
        it != meta.end() && owner != meta.end() && owner->second == *sv.token)
        sv.holder_fence = std::strtoll(it->second.c_str(), nullptr, 10);
    sv.holder = parse_holder(meta, *sv.token);
}

LockView merge_servers(std::string name, std::string key, std::vector<ServerView> servers) {
    LockView view;
    view.name = std::move(name);
    view.key = std::move(key);
    view.servers = std::move(servers);
    std::map<std::string, std::vector<long long>> ttls_by_token;
    std::vector<long long> wrong_type_ttls;
    size_t free_servers = 0;
    for (const auto& sv : view.servers) {
        if (!sv.reachable)
            continue;
        ++view.reachable;
        if (sv.wrong_type) {
            wrong_type_ttls.push_back(sv.ttl_ms);
            continue;
        }
        if (sv.fence)
            view.fence = std::max(view.fence.value_or(0), *sv.fence);
        if (sv.last_run && (!view.last_run || tells_more(*sv.last_run, *view.last_run)))
            view.last_run = sv.last_run;
        if (sv.cron &&
            (!view.cron || sv.cron->slot_ms > view.cron->slot_ms ||
             (sv.cron->slot_ms == view.cron->slot_ms && sv.cron->ended_ms && !view.cron->ended_ms)))
            view.cron = sv.cron;
        if (sv.token)
            ttls_by_token[*sv.token].push_back(sv.ttl_ms);
        else
            ++free_servers;
    }

    const size_t majority = majority_of(view.servers.size());
    for (auto& [token, ttls] : ttls_by_token) {
        if (ttls.size() < majority)
            continue;
        view.state = LockState::held;
        view.token = token;
        // Held until fewer than a majority still hold it: the majority-th longest TTL.
        std::ranges::sort(ttls, std::greater<>());
        view.ttl_ms = ttls[majority - 1];
        for (const auto& sv : view.servers)
            if (sv.token == token && sv.holder) {
                view.holder = sv.holder;
                break;
            }
        // The holder's fence is what its metadata records on a majority of all the servers:
        // round 1 records each server's own counter, a second round (when they differed)
        // the fence itself, and a server whose yes came too late to count may hold another
        // value. With servers missing it may not be told: unknown then, never the largest
        // counter, which an attempt that lost may have raised. Without metadata (another
        // client's lock), the largest counter as for a free lock.
        std::map<long long, size_t> fences;
        bool recorded = false;
        std::optional<long long> agreed;
        for (const auto& sv : view.servers)
            if (sv.token == token && sv.holder_fence) {
                recorded = true;
                if (++fences[*sv.holder_fence] >= majority)
                    agreed = *sv.holder_fence;
            }
        if (recorded)
            view.fence = agreed;
    }
    if (view.state != LockState::held && wrong_type_ttls.size() >= majority) {
        view.state = LockState::held;
        view.wrong_type = true;
        std::ranges::sort(wrong_type_ttls, std::greater<>());
        view.ttl_ms = plausible_pttl(wrong_type_ttls[majority - 1]);
    }
    if (view.state != LockState::held && free_servers >= majority)
        view.state = LockState::free;
    return view;
}

namespace {

// One lock (a name's, or a permit's) read on every server and merged.
LockView read_lock(std::span<redis::Connection> conns, std::string_view name, const Keys& keys,
                   bool with_slot, bool majority_only) {
    auto call = [&](bool by_sha) {
        if (!with_slot) // a permit has no --once-per record
            return script_call(k_inspect_script, by_sha, {keys.lock, keys.meta, keys.record},
                               {keys.fence_field});
        return script_call(k_inspect_script, by_sha, {keys.lock, keys.meta, keys.record},
                           {keys.fence_field, "slot"});
    };
    const auto command = call(true);
    const auto fallback = call(false);
    if (!majority_only) {
        redis::request_all(conns, command, fallback);
    } else {
        auto now = redis::Clock::now();
        for (auto& c : conns)
            c.start(command, fallback, now);
        (void)redis::wait(conns, [&] {
            size_t answered = 0;
            for (const auto& c : conns)
                answered += !c.busy() && c.outcome() && c.outcome()->reply;
            return answered >= majority_of(conns.size());
        });
    }

    std::vector<ServerView> servers;
    bool any_wrong_type = false;
    for (const auto& conn : conns) {
        ServerView sv;
        if (is_wrong_type(conn)) {
            sv.server = conn.name();
            sv.reachable = true;
            sv.wrong_type = true;
            any_wrong_type = true;
            servers.push_back(std::move(sv));
            continue;
        }
        const redisReply* reply = read_outcome(conn, sv);
        if (reply && (reply->type != REDIS_REPLY_ARRAY || reply->elements != 5)) {
            sv.reachable = false;
            sv.error = "unexpected reply " + redis::describe(*reply);
            reply = nullptr;
        }
        if (reply)
            read_inspect_reply(*reply, sv);
        servers.push_back(std::move(sv));
    }
    if (any_wrong_type) {
        // The script could not read the TTL of a key of another type; PTTL can.
        auto now = redis::Clock::now();
        const std::array<std::string_view, 2> pttl{"PTTL", keys.lock};
        for (size_t i = 0; i < conns.size(); ++i)
            if (servers[i].wrong_type)
                conns[i].start(redis::encode_command(pttl), {}, now);
        (void)redis::wait(conns, [] { return false; });
        for (size_t i = 0; i < conns.size(); ++i) {
            const auto& outcome = conns[i].outcome();
            if (servers[i].wrong_type && outcome && outcome->reply &&
                outcome->reply->type == REDIS_REPLY_INTEGER)
                servers[i].ttl_ms = outcome->reply->integer;
        }
    }
    return merge_servers(std::string(name), keys.lock, std::move(servers));
}

// The largest limit of a semaphore a server has ({key}:limit), if any.
std::optional<long long> read_limit(std::span<redis::Connection> conns, const Keys& keys) {
    const std::array<std::string_view, 2> get{"GET", keys.limit};
    redis::request_all(conns, redis::encode_command(get));
    std::optional<long long> limit;
    for (const auto& c : conns) {
        const auto& outcome = c.outcome();
        if (!outcome || !outcome->reply || outcome->reply->type != REDIS_REPLY_STRING)
            continue;
        const std::string text(redis::text(*outcome->reply));
        char* end = nullptr;
        long long n = std::strtoll(text.c_str(), &end, 10);
        if (*end == '\0' && n > 1 && n <= 1000)
            limit = std::max(limit.value_or(0), n);
    }
    return limit;
}

} // namespace

LockView inspect(std::span<redis::Connection> conns, std::string_view prefix, std::string_view name,
                 bool majority_only) {
    return inspect(conns, Keys(prefix, name), name, majority_only);
}

LockView inspect(std::span<redis::Connection> conns, const Keys& keys, std::string_view name,
                 bool majority_only) {
    auto view = read_lock(conns, name, keys, true, majority_only);
    // A semaphore (--limit): the name's key is then the set of its permit holders, which
    // reads as a key of the wrong type. Each permit is a lock of its own.
    if (!std::ranges::any_of(view.servers, [](const ServerView& s) { return s.wrong_type; }))
        return view;
    auto limit = read_limit(conns, keys);
    if (!limit)
        return view;
    view.limit = static_cast<size_t>(*limit);
    view.wrong_type = false;
    view.state = LockState::free;
    size_t unknown = 0;
    for (size_t i = 1; i <= view.limit; ++i) {
        auto permit = read_lock(conns, name, keys.permit(i), false, majority_only);
        if (permit.state == LockState::held)
            view.state = LockState::held;
        unknown += permit.state == LockState::unknown;
        view.permits.push_back(std::move(permit));
    }
    if (view.state != LockState::held && unknown > 0)
        view.state = LockState::unknown;
    return view;
}

namespace {

// The masters of a Redis Cluster from a node's CLUSTER NODES reply (lines of "id
// ip:port@cport[,hostname] flags ..."), those that may hold keys: not failed, with an
// address. Empty when the reply is an error (not a cluster node, or not allowed to ask).
std::vector<config::Endpoint> cluster_masters(const redis::Connection& conn) {
    std::vector<config::Endpoint> out;
    const auto& outcome = conn.outcome();
    if (!outcome || outcome->failure || outcome->reply->type != REDIS_REPLY_STRING)
        return out;
    std::string_view nodes = redis::text(*outcome->reply);
    while (!nodes.empty()) {
        const size_t newline = nodes.find('\n');
        std::string_view line = nodes.substr(0, newline);
        nodes = newline == std::string_view::npos ? std::string_view{} : nodes.substr(newline + 1);
        std::vector<std::string_view> fields;
        for (size_t start = 0; start < line.size() && fields.size() < 3;) {
            const size_t space = std::min(line.find(' ', start), line.size());
            fields.push_back(line.substr(start, space - start));
            start = space + 1;
        }
        if (fields.size() < 3)
            continue;
        const std::string_view flags = fields[2];
        if (flags.find("master") == std::string_view::npos ||
            flags.find("fail") != std::string_view::npos ||
            flags.find("noaddr") != std::string_view::npos ||
            flags.find("handshake") != std::string_view::npos)
            continue;
        std::string_view address = fields[1].substr(0, fields[1].find('@'));
        const size_t colon = address.rfind(':');
        if (colon == std::string_view::npos)
            continue;
        int port = 0;
        const auto digits = address.substr(colon + 1);
        auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
        if (ec != std::errc{} || port <= 0)
            continue;
        std::string host(address.substr(0, colon));
        out.push_back({host.empty() ? conn.server().url.host : host, port});
    }
    return out;
}

} // namespace

void wait_for_answers(std::span<redis::Connection> conns, size_t wait_for) {
    std::optional<redis::Clock::time_point> until;
    (void)redis::wait(
        conns,
        [&] {
            size_t answered = 0;
            for (const auto& c : conns)
                answered += !c.busy() && c.outcome() && c.outcome()->reply;
            if (answered < wait_for)
                return false;
            if (!until)
                until = redis::Clock::now() + k_list_stragglers;
            return redis::Clock::now() >= *until;
        },
        -1, &until);
}

std::string glob_escape(std::string_view text) {
    std::string out;
    for (char c : text) {
        if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\')
            out.push_back('\\');
        out.push_back(c);
    }
    return out;
}

NameScan::NameScan(std::span<redis::Connection> conns, std::string_view prefix,
                   std::string_view pattern, bool majority_only, std::string_view companion)
    : m_prefix(prefix), m_companion(companion) {
    // A Redis Cluster node holds only its own slots' keys: every master is scanned in its
    // place. A server that is not a cluster node refuses CLUSTER NODES and is scanned itself.
    const std::array<std::string_view, 2> cluster_nodes{"CLUSTER", "NODES"};
    auto now = redis::Clock::now();
    for (auto& c : conns)
        c.start(redis::encode_command(cluster_nodes), {}, now);
    wait_for_answers(conns, majority_only ? majority_of(conns.size()) : conns.size());
    bool any_cluster = false;
    for (auto& conn : conns) {
        auto masters = cluster_masters(conn);
        m_result.cluster.push_back(!masters.empty());
        any_cluster = any_cluster || !masters.empty();
        if (masters.empty())
            m_nodes.emplace_back(conn.server());
        for (const auto& master : masters) {
            auto server = conn.server();
            server.url.host = master.host;
            server.url.port = master.port;
            m_nodes.emplace_back(std::move(server));
        }
    }
    if (!any_cluster)
        m_nodes.clear();
    m_conns = any_cluster ? std::span<redis::Connection>(m_nodes) : conns;
    m_wait_for = majority_only ? majority_of(m_conns.size()) : m_conns.size();
    m_cursors.assign(m_conns.size(), "0");
    m_done.assign(m_conns.size(), false);
    m_stage.assign(m_conns.size(), 0);
    // The lock keys, then (with `companion`) the names' companion keys of that suffix: each
    // server goes through them one after the other.
    m_matches.push_back(glob_escape(prefix) + std::string(pattern));
    if (!companion.empty())
        m_matches.push_back("{" + glob_escape(prefix) + std::string(pattern) +
                            "}:" + glob_escape(companion));
}

NameScan::~NameScan() = default;

bool NameScan::step() {
    // SCAN visits every key present for the whole scan at least once; the bound only stops
    // a misbehaving server from keeping us forever.
    if (++m_rounds > 1'000'000)
        return false;
    auto now = redis::Clock::now();
    bool any = false;
    for (size_t i = 0; i < m_conns.size(); ++i) {
        if (m_done[i])
            continue;
        std::array<std::string_view, 6> argv{"SCAN",  m_cursors[i], "MATCH", m_matches[m_stage[i]],
                                             "COUNT", "1000"};
        m_conns[i].start(redis::encode_command(argv), {}, now);
        any = true;
    }
    if (!any)
        return false;
    // (A server done already counts as answered: its last reply is still there.)
    wait_for_answers(m_conns, m_wait_for);
    for (size_t i = 0; i < m_conns.size(); ++i) {
        if (m_done[i])
            continue;
        ServerView sv;
        const redisReply* reply = read_outcome(m_conns[i], sv);
        if (reply && (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2)) {
            sv.reachable = false;
            sv.error = "unexpected reply to SCAN";
            reply = nullptr;
        }
        if (!reply) {
            m_done[i] = true;
            m_result.failures.push_back(std::move(sv));
            continue;
        }
        if (reply && (reply->element[0]->type != REDIS_REPLY_STRING ||
                      !is_cursor(redis::text(*reply->element[0])))) {
            // Looping on a cursor that can never be 0 would keep us for a million
            // rounds: treat the server as broken.
            sv.reachable = false;
            sv.error =
                "unexpected reply to SCAN (cursor " + redis::describe(*reply->element[0]) + ")";
            m_done[i] = true;
            m_result.failures.push_back(std::move(sv));
            continue;
        }
        m_cursors[i] = std::string(redis::text(*reply->element[0]));
        const redisReply* keys = reply->element[1];
        const std::string head =
            m_stage[i] == 0 ? std::string(m_prefix) : "{" + std::string(m_prefix);
        const std::string tail = m_stage[i] == 0 ? std::string() : "}:" + std::string(m_companion);
        for (size_t k = 0; keys->type == REDIS_REPLY_ARRAY && k < keys->elements; ++k) {
            auto key = redis::text(*keys->element[k]);
            if (!key.starts_with(head) || !key.ends_with(tail) ||
                key.size() < head.size() + tail.size())
                continue;
            auto name = key.substr(head.size(), key.size() - head.size() - tail.size());
            if (validate_name(name))
                m_names.emplace(name);
        }
        if (m_cursors[i] == "0" && ++m_stage[i] < m_matches.size())
            continue; // the next match, from cursor 0
        if (m_cursors[i] == "0") {
            m_done[i] = true;
            ++m_result.scanned;
        }
    }
    return std::ranges::any_of(m_done, [](bool done) { return !done; });
}

ListResult NameScan::result() && {
    m_result.names.assign(std::make_move_iterator(m_names.begin()),
                          std::make_move_iterator(m_names.end()));
    return std::move(m_result);
}

ListResult list_names(std::span<redis::Connection> conns, std::string_view prefix,
                      std::string_view pattern, bool majority_only, std::string_view companion) {
    NameScan scan(conns, prefix, pattern, majority_only, companion);
    while (scan.step()) {
    }
    return std::move(scan).result();
}

size_t force_release(std::span<redis::Connection> conns, const LockView& view,
                     const ForceRelease& by) {
    // A semaphore: every permit shown held is released as its holder would (which also
    // takes it out of the name's set); the set itself, with the limit, then goes below.
    const auto keys = Keys::of_lock_key(view.key);
    // Its running holder hears "forced ID", and who did it, on the events channel (it
    // listens there, job/supervise.cpp; `watch` too), in the same write as the release. ID
    // names the token released (release_id): a holder believes a notice about its own.
    auto notice = [&](std::string_view token) {
        const std::string forced =
            util::format("forced {} {} {} {}", release_id(token), by.host, by.pid, by.user);
        const std::array<std::string_view, 3> publish{"PUBLISH", keys.events, forced};
        return redis::encode_command(publish);
    };
    std::vector<bool> released(conns.size(), false); // a permit, on each server
    for (size_t p = 0; p < view.permits.size(); ++p) {
        const auto& permit = view.permits[p];
        const auto pk = keys.permit(p + 1);
        auto now = redis::Clock::now();
        for (size_t i = 0; i < conns.size() && i < permit.servers.size(); ++i)
            if (const auto& token = permit.servers[i].token)
                conns[i].start_pipelined(
                    script_call(k_release_permit_script, false,
                                {pk.lock, pk.meta, keys.record, keys.lock, keys.limit, keys.waiters,
                                 keys.queue},
                                {*token, keys.released, keys.wake, "1", std::to_string(p + 1)}) +
                        notice(*token),
                    1, now);
        (void)redis::wait(conns, [] { return false; });
        for (size_t i = 0; i < conns.size() && i < permit.servers.size(); ++i) {
            const auto& outcome = conns[i].outcome();
            released[i] = released[i] || (permit.servers[i].token && outcome && outcome->reply &&
                                          outcome->reply->type == REDIS_REPLY_INTEGER &&
                                          outcome->reply->integer == 1);
        }
    }
    if (view.limit > 0) {
        // The set goes, and the history records the force once (its entry names no holder:
        // a semaphore has several).
        const std::array<std::string_view, 2> del{"DEL", keys.limit};
        const std::string entry = by.record ? history_command(keys, "", *by.record) : "";
        const std::string request = redis::encode_command(del) + entry;
        auto now = redis::Clock::now();
        for (auto& c : conns)
            c.start_pipelined(request, entry.empty() ? 0 : 1, now);
        (void)redis::wait(conns, [] { return false; });
    }
    auto now = redis::Clock::now(); // the record stays: its fence counter above all
    for (size_t i = 0; i < conns.size() && i < view.servers.size(); ++i) {
        const auto& token = view.servers[i].token;
        if (view.servers[i].wrong_type) {
            const std::array<std::string_view, 4> argv{"EVAL", k_remove_wrong_type_script.source,
                                                       "1", view.key};
            conns[i].start(redis::encode_command(argv), {}, now);
            continue;
        }
        if (!token)
            continue;
        // The release wakes the waiters; its holder hears who forced it, in the same
        // write, and the history records it (a pipelined EVAL: no NOSCRIPT).
        const std::string entry = by.record ? history_command(keys, *token, *by.record) : "";
        std::string request =
            script_call(k_release_script, false,
                        {keys.lock, keys.meta, keys.record, keys.waiters, keys.queue},
                        {*token, keys.released, keys.wake}) +
            notice(*token) + entry;
        conns[i].start_pipelined(std::move(request), entry.empty() ? 1 : 2, now);
    }
    (void)redis::wait(conns, [] { return false; });
    size_t deleted = 0;
    for (size_t i = 0; i < conns.size() && i < view.servers.size(); ++i) {
        if (!view.servers[i].token && !view.servers[i].wrong_type)
            continue;
        const auto& outcome = conns[i].outcome();
        if (released[i] ||
            (outcome && outcome->reply && outcome->reply->type == REDIS_REPLY_INTEGER &&
             outcome->reply->integer == 1))
            ++deleted;
    }
    return deleted;
}

util::Error unreadable_error(const std::vector<ServerView>& servers) {
    bool auth = false;
    std::string causes;
    for (const auto& s : servers) {
        if (s.reachable)
            continue;
        auth |= s.auth_error;
        if (!causes.empty())
            causes += "; ";
        causes += s.server + ": " + s.error;
    }
    return util::Error{auth ? util::ErrorKind::auth : util::ErrorKind::unavailable,
                       util::format("no server could be read ({})", causes)};
}

} // namespace redlock::lock
