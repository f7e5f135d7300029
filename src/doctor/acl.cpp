#include "doctor/acl.hpp"

#include <algorithm>
#include <cctype>

#include "fleet/read_script.hpp"
#include "lock/keys.hpp"
#include "lock/name.hpp"
#include "lock/scripts.hpp"
#include "util/format.hpp"

namespace redlock::doctor {

namespace {

// Indexes into acl_features().
enum Feature : size_t {
    run,
    evalsha,
    status,
    waiting,
    wake,
    numsub,
    fair,
    once_per,
    limit,
    list,
    history,
    watch,
    fleet,
    doctor_reads,
    select,
    replicas,
};

// The commands that can refuse a script, for naming the candidates when the server refuses
// one inside it without saying which: those it calls with redis.call (a refusal inside
// redis.pcall is swallowed), and its --fair parts' only where the probe gives --fair's keys.
std::vector<std::string_view> calls_of(const lock::Script& s) {
    return s.calls.names();
}
std::vector<std::string_view> fair_calls_of(const lock::Script& s) {
    lock::Commands all = s.calls;
    all.add(s.fair_calls);
    return all.names();
}

const char* k_ttl = "1000"; // the probe lock's lease: gone in a second whatever happens
const char* k_holder_field = "host";
const char* k_holder_value = "redlock-doctor";

Argv script(const lock::Script& s, const std::vector<std::string>& keys,
            const std::vector<std::string>& args) {
    Argv argv{"EVAL", std::string(s.source), std::to_string(keys.size())};
    argv.insert(argv.end(), keys.begin(), keys.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
}

// The fleet's reading of the probe lock (fleet/read_script.hpp), sent as `how`.
Argv read_script(const ProbeKeys& k, std::string how) {
    Argv argv{std::move(how), std::string(fleet::k_read_script.source)};
    for (const auto operand : fleet::read_script_operands(k.names, "64"))
        argv.emplace_back(operand);
    return argv;
}

std::string lower(std::string_view text) {
    std::string out;
    for (char c : text)
        out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    return out;
}

std::string upper(std::string_view text) {
    std::string out;
    for (char c : text)
        out.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
    return out;
}

// The key pattern that covers `key`: `{<prefix>*}:*` for a companion, else `<prefix>*`.
std::string pattern_for(std::string_view key, const ProbeKeys& keys) {
    if (key.starts_with("{" + keys.prefix))
        return "{" + keys.prefix + "*}:*";
    return keys.prefix + "*";
}

// One thing refused ("PEXPIRE", keys '{lock:*}:*'), the features it costs, and the
// ACL SETUSER rules that allow it.
struct Missing {
    AclRefusal::Kind kind;
    std::string label;
    std::vector<std::string> rules;
    std::vector<size_t> features;
};

void add_missing(std::vector<Missing>& all, AclRefusal::Kind kind, std::string label,
                 std::vector<std::string> rules, size_t feature) {
    auto it = std::ranges::find_if(
        all, [&](const Missing& m) { return m.kind == kind && m.label == label; });
    if (it == all.end()) {
        all.push_back({kind, std::move(label), std::move(rules), {}});
        it = all.end() - 1;
    }
    if (std::ranges::find(it->features, feature) == it->features.end())
        it->features.push_back(feature);
}

std::string shell_word(std::string_view rule) {
    bool plain = std::ranges::all_of(rule, [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '_';
    });
    return plain ? std::string(rule) : "'" + std::string(rule) + "'";
}

} // namespace

ProbeKeys::ProbeKeys(std::string_view key_prefix)
    : names(key_prefix, "redlock-doctor-probe"), prefix(key_prefix) {
    const lock::Keys& k = names;
    const lock::Keys p = k.permit(1);
    lock = k.lock;
    meta = k.meta;
    record = k.record;
    channel = k.released;
    old_slot = k.old_slot;
    queue = k.queue;
    waiting = k.waiting;
    limit = k.limit;
    permit = p.lock;
    permit_meta = p.meta;
    old_permit_fence = p.old_fence;
    events = k.events;
    waiters = k.waiters;
    wake = k.wake;
    wake_channel = k.wake + "redlock-doctor"; // no waiter has this id
}

std::vector<AclFeature> acl_features(const config::ServerConfig& server) {
    std::vector<AclFeature> features(replicas + 1);
    features[run] = {Level::risk, "run, acquire, extend and release fail"};
    features[evalsha] = {Level::note, "every script goes as EVAL, the whole script each time"};
    features[status] = {Level::note, "status, list, reap and release --force fail, and a run "
                                     "takes over no lock of this machine's earlier boot"};
    features[waiting] = {Level::note,
                         "waiters poll every 20-200ms instead of being woken by the release"};
    features[wake] = {Level::note, "waiters listen to the release channel instead, and each "
                                   "release wakes them all"};
    features[numsub] = {Level::note, "a --fair waiter asleep at the head of the queue is "
                                     "dropped as gone after 3s"};
    features[fair] = {Level::note, "--fair fails"};
    features[once_per] = {Level::note, "--once-per fails"};
    features[limit] = {Level::note, "--limit fails"};
    features[list] = {Level::note, "list fails"};
    features[history] = {Level::note, "runs are neither recorded nor counted: history shows "
                                      "none, and the exporter no counters"};
    features[watch] = {Level::note, "watch cannot follow the locks, and a running holder hears "
                                    "a release --force only at its next renewal"};
    features[fleet] = {Level::note, "watch and the exporter cannot read the locks"};
    features[doctor_reads] = {Level::note, "doctor cannot read the server's settings"};
    features[select] = {Level::risk, util::format("db {} cannot be selected", server.url.db)};
    features[replicas] = {
        Level::risk,
        util::format("replicas = {} needs WAIT: no lock write counts here", server.replicas)};
    return features;
}

std::vector<AclProbe> acl_dryrun_probes(const ProbeKeys& k, const config::ServerConfig& server) {
    const std::string token = "redlock-doctor-token";
    const std::vector<std::string> lock_keys{k.lock, k.meta, k.record};
    std::vector<AclProbe> out;
    auto add = [&](size_t feature, Argv argv) {
        out.push_back({feature, std::move(argv), {}, {}});
    };

    add(run, script(lock::k_acquire_script, lock_keys,
                    {token, k_ttl, k_ttl, "0", "f", k_holder_field, k_holder_value}));
    for (const auto& key : {k.lock, k.record})
        add(run, {"GET", key});
    add(run, {"SET", k.lock, token, "NX", "PX", k_ttl});
    for (const auto& key : {k.meta, k.lock, k.record})
        add(run, {"DEL", key});
    add(run, {"HSET", k.meta, k_holder_field, k_holder_value});
    for (const auto& key : {k.meta, k.lock, k.record})
        add(run, {"PEXPIRE", key, k_ttl});
    add(run, {"HINCRBY", k.record, "f", "1"});
    add(run, {"HGET", k.record, "f"});
    add(run, {"HSET", k.record, "f", "1"});
    add(run, {"HDEL", k.record, "f"});
    add(run, {"TYPE", k.record});
    add(run, {"TIME"});
    add(run, {"EXISTS", k.meta});
    add(run, {"PTTL", k.lock});

    // No keys: EVAL has them checked, so a refusal here can only be of EVALSHA itself.
    add(evalsha, {"EVALSHA", std::string(lock::k_inspect_script.sha1), "0"});

    add(status, script(lock::k_inspect_script, lock_keys, {"f", "slot"}));
    for (const auto& key : {k.meta, k.record})
        add(status, {"HMGET", key, "token"});
    add(status, {"PTTL", k.lock});
    add(status, {"GET", k.limit});

    add(waiting, {"PUBLISH", k.channel, "released"});
    add(waiting, {"SUBSCRIBE", k.channel});
    add(wake, {"SUBSCRIBE", k.wake_channel});
    add(wake, {"PUBLISH", k.wake_channel, "released"});
    add(wake, script(lock::k_acquire_script, {k.lock, k.meta, k.record, k.waiters},
                     {token, k_ttl, k_ttl, "0", "f", "1", "0", token, k.wake}));
    add(wake, {"ZADD", k.waiters, "1", token});
    add(wake, {"ZSCORE", k.waiters, token});
    add(wake, {"ZRANGE", k.waiters, "0", "7"});
    add(wake, {"ZREM", k.waiters, token});
    add(wake, {"PEXPIRE", k.waiters, k_ttl});
    add(numsub, {"PUBSUB", "NUMSUB", k.wake_channel});

    add(fair, script(lock::k_acquire_script, {k.lock, k.meta, k.record, k.queue, k.waiting},
                     {token, k_ttl, k_ttl, "0", "f", "1", k_ttl, token, k.wake}));
    add(fair, {"ZRANGE", k.queue, "-1", "-1", "WITHSCORES"});
    add(fair, {"ZRANK", k.queue, token});
    add(fair, {"ZRANGE", k.queue, "0", "7"});
    add(fair, {"ZADD", k.queue, "NX", "1", token});
    add(fair, {"ZADD", k.waiting, "1", token});
    for (const auto& key : {k.queue, k.waiting})
        add(fair, {"PEXPIRE", key, k_ttl});
    add(fair, {"ZRANGE", k.queue, "0", "0"});
    add(fair, {"ZSCORE", k.waiting, token});
    for (const auto& key : {k.queue, k.waiting})
        add(fair, {"ZREM", key, token});
    add(fair, {"TIME"});

    add(once_per, script(lock::k_claim_slot_script, {k.lock, k.record, k.old_slot},
                         {token, k_ttl, "0", k_ttl, token}));
    add(once_per, {"TIME"});
    add(once_per, {"HMGET", k.record, "s"});
    add(once_per, {"HMGET", k.old_slot, "slot"});
    add(once_per, {"HSET", k.record, "s", "1"});
    add(once_per, {"PEXPIRE", k.record, k_ttl});

    const std::vector<std::string> permit_keys{k.permit, k.permit_meta, k.record,
                                               k.lock,   k.limit,       k.old_permit_fence};
    add(limit,
        script(lock::k_acquire_permit_script, permit_keys, {token, k_ttl, k_ttl, "0", "f1", "2"}));
    add(limit, {"TYPE", k.lock});
    add(limit, {"TIME"});
    add(limit, {"ZREMRANGEBYSCORE", k.lock, "-inf", "0"});
    add(limit, {"ZCARD", k.lock});
    add(limit, {"ZADD", k.lock, "1", token});
    add(limit, {"ZRANGE", k.lock, "-1", "-1", "WITHSCORES"});
    add(limit, {"ZREM", k.lock, token});
    add(limit, {"GET", k.limit});
    add(limit, {"SET", k.limit, "2"});
    for (const auto& key : {k.lock, k.limit})
        add(limit, {"PEXPIREAT", key, "1"});
    add(limit, {"GET", k.permit});
    add(limit, {"SET", k.permit, token, "NX", "PX", k_ttl});
    add(limit, {"DEL", k.permit_meta});
    add(limit, {"DEL", k.lock, k.limit});
    add(limit, {"HINCRBY", k.record, "f1", "1"});
    add(limit, {"GET", k.old_permit_fence});
    add(limit, {"DEL", k.old_permit_fence});
    add(limit, {"HSET", k.permit_meta, k_holder_field, k_holder_value});
    for (const auto& key : {k.permit_meta, k.permit})
        add(limit, {"PEXPIRE", key, k_ttl});

    add(list, {"SCAN", "0", "MATCH", k.prefix + "*", "COUNT", "1000"});

    add(history, script(lock::k_history_script, lock_keys,
                        {"run", token, "1", k_ttl, "0", "0", "run", "redlock-doctor"}));
    add(history, {"HMGET", k.record, "e"});
    add(history, {"HSET", k.record, "e", "redlock-doctor"});
    add(history, {"HDEL", k.record, "e"});
    add(history, {"PEXPIRE", k.record, k_ttl});
    add(history, {"HMGET", k.meta, "token"});
    add(history, script(lock::k_history_page_script, {k.record}, {"+", "1", "65536", "65536"}));
    add(watch, {"PSUBSCRIBE", "{" + k.prefix + "*}:released", "{" + k.prefix + "*}:events"});
    add(watch, {"SUBSCRIBE", k.events}); // a running holder (job/supervise.cpp)
    add(fleet, read_script(k, "EVAL_RO"));
    add(fleet, {"EVALSHA_RO", std::string(fleet::k_read_script.sha1), "0"});
    add(fleet, {"SCRIPT", "LOAD", "return 1"});
    add(fleet, {"TYPE", k.lock});
    add(fleet, {"GET", k.lock});
    add(fleet, {"PTTL", k.lock});
    add(fleet, {"HGETALL", k.meta});
    add(fleet, {"HMGET", k.record, "f"});
    add(fleet, {"ZRANGEBYSCORE", k.lock, "0", "+inf", "LIMIT", "0", "1"});
    add(fleet, {"ZCARD", k.waiters});
    add(fleet, {"ZCARD", k.queue});
    add(fleet, {"PUBSUB", "NUMSUB", k.channel});
    add(fleet, {"TIME"});

    add(doctor_reads, {"PING"});
    add(doctor_reads, {"INFO", "server"});
    add(doctor_reads, {"CONFIG", "GET", "maxmemory-policy"});
    add(doctor_reads, {"TIME"});

    if (server.url.db != 0)
        add(select, {"SELECT", std::to_string(server.url.db)});
    if (server.replicas > 0)
        add(replicas, {"WAIT", std::to_string(server.replicas), "1"});
    return out;
}

std::vector<AclProbe> acl_probe_round1(const ProbeKeys& k, const config::ServerConfig& server,
                                       const std::string& token, bool before_redis7) {
    const std::vector<std::string> lock_keys{k.lock, k.meta, k.record};
    std::vector<AclProbe> out;
    // The acquisition first: the probe lock is then held, with metadata, by our token, so
    // that every script after it takes its full path. The probe's record is kept a second
    // (its history's age), whatever happens.
    out.push_back({run,
                   script(lock::k_acquire_script, lock_keys,
                          {token, k_ttl, k_ttl, "0", "f", k_holder_field, k_holder_value}),
                   calls_of(lock::k_acquire_script), lock_keys});
    // With the channels, as extend sends them: the script then reads the PTTL too.
    const std::vector<std::string> wake_keys{k.lock, k.meta, k.record, k.waiters, k.queue};
    out.push_back({run, script(lock::k_renew_script, wake_keys, {token, k_ttl, k.channel, k.wake}),
                   calls_of(lock::k_renew_script), wake_keys});
    // The key patterns alone: EVAL checks the keys it is given before the script runs.
    for (const auto& key : {k.lock, k.meta})
        out.push_back({run, {"EVAL", "return 1", "1", key}, {}, {key}});
    out.push_back({evalsha, {"EVALSHA", std::string(lock::k_inspect_script.sha1), "0"}, {}, {}});
    out.push_back({status, script(lock::k_inspect_script, lock_keys, {"f", "slot"}),
                   calls_of(lock::k_inspect_script), lock_keys});
    // No one waits on the probe lock's channel: the message wakes nobody.
    out.push_back({waiting, {"PUBLISH", k.channel, "redlock-doctor"}, {}, {}});
    out.push_back({wake, {"PUBLISH", k.wake_channel, "redlock-doctor"}, {}, {}});
    out.push_back({wake, {"ZRANGE", k.waiters, "0", "7"}, {}, {k.waiters}});
    out.push_back({numsub, {"PUBSUB", "NUMSUB", k.wake_channel}, {}, {}});
    out.push_back({fair, {"ZRANGE", k.queue, "-1", "-1", "WITHSCORES"}, {}, {k.queue}});
    out.push_back({fair, {"ZRANK", k.queue, token}, {}, {k.queue}});
    out.push_back({list, {"SCAN", "0", "MATCH", k.lock, "COUNT", "10"}, {}, {}});
    // Its entry has no outcome, so the script counts nothing.
    out.push_back({history,
                   script(lock::k_history_script, lock_keys,
                          {"run", token, "1", k_ttl, "0", "0", "run", "redlock-doctor"}),
                   calls_of(lock::k_history_script), lock_keys});
    out.push_back({history,
                   script(lock::k_history_page_script, {k.record}, {"+", "1", "65536", "65536"}),
                   calls_of(lock::k_history_page_script),
                   {k.record}});
    // watch's and the exporter's reading, read-only (before Redis 7, which has no _RO
    // commands, as they send it there), and loading it for EVALSHA_RO.
    out.push_back({fleet,
                   read_script(k, before_redis7 ? "EVAL" : "EVAL_RO"),
                   calls_of(fleet::k_read_script),
                   {k.lock, k.meta, k.record, k.waiters, k.queue, k.limit}});
    out.push_back({fleet, {"SCRIPT", "LOAD", std::string(fleet::k_read_script.source)}, {}, {}});
    out.push_back(
        {fleet,
         {before_redis7 ? "EVALSHA" : "EVALSHA_RO", std::string(fleet::k_read_script.sha1), "0"},
         {},
         {}});
    // The events channel (PSUBSCRIBE itself can only be tried by subscribing); `watch`
    // ignores this message.
    out.push_back({watch, {"PUBLISH", k.events, "redlock-doctor"}, {}, {}});
    out.push_back({doctor_reads, {"PING"}, {}, {}});
    out.push_back({doctor_reads, {"INFO", "server"}, {}, {}});
    out.push_back({doctor_reads, {"CONFIG", "GET", "maxmemory-policy"}, {}, {}});
    out.push_back({doctor_reads, {"TIME"}, {}, {}});
    // SELECT was sent when connecting; WAIT for no replica answers at once.
    if (server.replicas > 0)
        out.push_back({replicas, {"WAIT", "0", "1"}, {}, {}});
    return out;
}

std::vector<AclProbe> acl_probe_round2(const ProbeKeys& k, const std::string& token,
                                       long long fence) {
    const std::vector<std::string> lock_keys{k.lock, k.meta, k.record};
    const std::vector<std::string> fair_keys{k.lock, k.meta, k.record, k.queue, k.waiting};
    const std::vector<std::string> permit_keys{k.permit, k.permit_meta, k.record,
                                               k.lock,   k.limit,       k.old_permit_fence};
    const std::vector<std::string> release_keys{k.lock, k.meta, k.record, k.waiters, k.queue};
    const std::vector<std::string> permit_release_keys{k.permit, k.permit_meta, k.record, k.lock,
                                                       k.limit,  k.waiters,     k.queue};
    std::vector<AclProbe> out;
    out.push_back(
        {run,
         script(lock::k_fence_script, lock_keys, {token, std::to_string(fence), "f", k_ttl, "0"}),
         calls_of(lock::k_fence_script), lock_keys});
    const std::vector<std::string> slot_keys{k.lock, k.record, k.old_slot};
    out.push_back({once_per,
                   script(lock::k_claim_slot_script, slot_keys,
                          {token, k_ttl, "0", k_ttl, token, k_holder_field, k_holder_value}),
                   calls_of(lock::k_claim_slot_script), slot_keys});
    out.push_back({once_per,
                   script(lock::k_finish_slot_script, {k.record}, {token, "0", k_ttl, k_ttl}),
                   calls_of(lock::k_finish_slot_script),
                   {k.record}});
    out.push_back({run, script(lock::k_release_script, release_keys, {token, k.channel, k.wake}),
                   calls_of(lock::k_release_script), release_keys});
    // --fair: a fresh acquisition through the queue (our ticket 1: the queue is ours alone),
    // its release, and leaving the queue.
    out.push_back({fair,
                   script(lock::k_acquire_script, fair_keys,
                          {token, k_ttl, k_ttl, "0", "f", "1", k_ttl, token, k.wake, k_holder_field,
                           k_holder_value}),
                   fair_calls_of(lock::k_acquire_script), fair_keys});
    out.push_back({fair, script(lock::k_release_script, release_keys, {token, k.channel, k.wake}),
                   calls_of(lock::k_release_script), release_keys});
    out.push_back({fair,
                   script(lock::k_fair_leave_script, {k.queue, k.waiting}, {token, k.wake}),
                   calls_of(lock::k_fair_leave_script),
                   {k.queue, k.waiting}});
    // --limit: a permit of 2 over the (now free) probe lock, renewed and released.
    out.push_back({limit,
                   script(lock::k_acquire_permit_script, permit_keys,
                          {token, k_ttl, k_ttl, "0", "f1", "2", k_holder_field, k_holder_value}),
                   calls_of(lock::k_acquire_permit_script), permit_keys});
    out.push_back({limit,
                   script(lock::k_renew_permit_script, permit_keys, {token, k_ttl, k.channel}),
                   calls_of(lock::k_renew_permit_script), permit_keys});
    out.push_back(
        {limit,
         script(lock::k_release_permit_script, permit_release_keys, {token, k.channel, k.wake}),
         calls_of(lock::k_release_permit_script), permit_release_keys});
    return out;
}

AclProbe acl_subscribe_probe(const ProbeKeys& k) {
    return {wake, {"SUBSCRIBE", k.wake_channel}, {}, {}};
}

std::optional<AclRefusal> parse_acl_refusal(std::string_view reply) {
    const std::string t = lower(reply.substr(0, 300));
    const bool refusal = t.starts_with("noperm") || t.find("no permissions") != std::string::npos ||
                         t.find("the user executing the script can't") != std::string::npos;
    if (!refusal)
        return std::nullopt;
    // "... to run the 'x' command", "... to access the 'x' key", "... the 'x' channel"
    auto open = t.find("the '");
    if (open != std::string::npos) {
        auto start = open + 5;
        auto close = reply.find('\'', start);
        if (close != std::string_view::npos) {
            auto name = std::string(reply.substr(start, close - start));
            auto rest = std::string_view(t).substr(close + 1);
            if (rest.starts_with(" key"))
                return AclRefusal{AclRefusal::Kind::key, name};
            if (rest.starts_with(" channel"))
                return AclRefusal{AclRefusal::Kind::channel, name};
            return AclRefusal{AclRefusal::Kind::command, lower(name)};
        }
    }
    // "... one of the keys used as arguments", "... can't access at least one of the keys",
    // "... can't run this command or subcommand" (inside a script: which one, it does not say).
    if (t.find("channel") != std::string::npos)
        return AclRefusal{AclRefusal::Kind::channel, {}};
    if (t.find("key") != std::string::npos)
        return AclRefusal{AclRefusal::Kind::key, {}};
    return AclRefusal{AclRefusal::Kind::command, {}};
}

bool lacks_command(std::string_view reply) {
    const std::string t = lower(reply.substr(0, 300));
    return std::ranges::any_of(
        std::initializer_list<std::string_view>{"syntax error", "unknown command",
                                                "unknown redis command", "unknown subcommand",
                                                "wrong number of arguments"},
        [&](std::string_view words) { return t.find(words) != t.npos; });
}

Check acl_verdict(std::string_view user, std::string_view how, std::span<const AclFeature> features,
                  std::span<const AclFinding> findings, const ProbeKeys& keys) {
    using Kind = AclRefusal::Kind;
    auto key_patterns = [&](const AclFinding& f) {
        std::vector<std::string> patterns;
        if (!f.refusal.name.empty())
            patterns.push_back(pattern_for(f.refusal.name, keys));
        else
            for (const auto& key : f.probe->keys)
                if (auto p = pattern_for(key, keys);
                    std::ranges::find(patterns, p) == patterns.end())
                    patterns.push_back(p);
        return patterns;
    };
    // The key patterns known for certain to be missing: a refusal naming its key, or of a
    // command given one key.
    std::vector<std::string> exact;
    for (const auto& f : findings)
        if (f.refusal.kind == Kind::key)
            if (auto p = key_patterns(f); p.size() == 1)
                exact.push_back(p.front());

    std::vector<Missing> missing;
    for (const auto& f : findings) {
        const size_t feature = f.probe->feature;
        switch (f.refusal.kind) {
        case Kind::command:
            if (!f.refusal.name.empty()) {
                add_missing(missing, Kind::command, upper(f.refusal.name), {"+" + f.refusal.name},
                            feature);
            } else if (!f.probe->calls.empty()) {
                std::string label = "one of";
                std::vector<std::string> rules;
                for (auto c : f.probe->calls) {
                    label += " " + upper(c);
                    rules.push_back("+" + std::string(c));
                }
                add_missing(missing, Kind::command, label, std::move(rules), feature);
            } else {
                const auto& name = f.probe->argv.front();
                add_missing(missing, Kind::command, upper(name), {"+" + lower(name)}, feature);
            }
            break;
        case Kind::key: {
            // A refusal that does not name its key: the patterns of the keys it was given
            // that were refused alone too, if any were.
            std::vector<std::string> patterns = key_patterns(f);
            if (patterns.size() > 1) {
                std::vector<std::string> known;
                for (const auto& p : patterns)
                    if (std::ranges::find(exact, p) != exact.end())
                        known.push_back(p);
                if (!known.empty())
                    patterns = known;
            }
            for (const auto& p : patterns)
                add_missing(missing, Kind::key, "'" + p + "'", {"~" + p}, feature);
            break;
        }
        case Kind::channel: {
            // The channel refused, or the one the probe used: the events channel, a
            // waiter's wake channel, or the release channel.
            auto kind_of = [&](std::string_view channel) -> std::string {
                if (channel.ends_with("}:events"))
                    return "events";
                if (channel.find("}:w:") != std::string_view::npos)
                    return "w:*";
                if (channel.ends_with("}:released"))
                    return "released";
                return {};
            };
            std::string kind = kind_of(f.refusal.name);
            if (f.refusal.name.empty())
                for (const auto& arg : f.probe->argv)
                    if (kind.empty())
                        kind = kind_of(arg);
            const std::string p = "{" + keys.prefix + "*}:" + (kind.empty() ? "released" : kind);
            add_missing(missing, Kind::channel, "'" + p + "'", {"&" + p}, feature);
            break;
        }
        }
    }
    if (missing.empty())
        return {"acl", Level::ok,
                util::format("user '{}' may run every command redlock sends ({})", user, how)};

    // Merges the keys (and channels) that the same features miss into one clause.
    Level level = Level::note;
    std::vector<std::string> clauses;
    std::vector<std::string> rules;
    auto clause = [&](Kind kind, std::string_view verb) {
        std::string text;
        for (const auto& m : missing) {
            if (m.kind != kind)
                continue;
            std::string costs;
            for (size_t feature : m.features) {
                costs += (costs.empty() ? "" : "; ") + features[feature].without;
                if (features[feature].level == Level::risk)
                    level = Level::risk;
            }
            text += util::format("{}{} ({})", text.empty() ? "" : ", ", m.label, costs);
            for (const auto& r : m.rules)
                if (std::ranges::find(rules, r) == rules.end())
                    rules.push_back(r);
        }
        if (!text.empty())
            clauses.push_back(std::string(verb) + " " + text);
    };
    clause(Kind::command, "may not run");
    clause(Kind::key, "may not access the keys");
    clause(Kind::channel, "may not use the channels");

    std::string message = util::format("user '{}'", user);
    for (size_t i = 0; i < clauses.size(); ++i)
        message += (i == 0 ? " " : "; ") + clauses[i];
    message += util::format("; allow with: ACL SETUSER {}", user);
    for (const auto& r : rules)
        message += " " + shell_word(r);
    message += util::format(" ({})", how);
    return {"acl", level, message};
}

} // namespace redlock::doctor
