#pragma once
// The "acl" check of `redlock doctor`: every command redlock sends, grouped by what needs
// it, on a probe lock under the key prefix; and the verdict on a user from the refusals
// found, whether asked with ACL DRYRUN (Redis 7) or found by running the lock scripts.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "doctor/doctor.hpp"
#include "lock/keys.hpp"

namespace redlock::doctor {

using Argv = std::vector<std::string>;

// Something redlock does, and what a user whose ACL refuses it loses.
struct AclFeature {
    Level level;         // of a refusal: risk where run cannot lock, note where optional
    std::string without; // "run, acquire, extend and release fail"
};

// One command sent to find out. `calls` lists the commands a script calls: a refusal
// inside a script does not say which one was refused. `keys` are the keys it names.
struct AclProbe {
    size_t feature;
    Argv argv;
    std::vector<std::string_view> calls;
    std::vector<std::string> keys;
};

// The probe lock and its companions, under `prefix`; they never name a real lock.
struct ProbeKeys {
    explicit ProbeKeys(std::string_view prefix);
    lock::Keys names; // of the probe lock, whose keys the fields below repeat
    std::string prefix, lock, meta, record, channel, old_slot, queue, waiting, limit, permit,
        permit_meta, old_permit_fence, events, waiters, wake, wake_channel;
};

// The features, indexed by AclProbe::feature; SELECT and WAIT only where the server's
// db and replicas need them.
[[nodiscard]] std::vector<AclFeature> acl_features(const config::ServerConfig& server);

// Every command redlock sends, for ACL DRYRUN (they are not run).
[[nodiscard]] std::vector<AclProbe> acl_dryrun_probes(const ProbeKeys& keys,
                                                      const config::ServerConfig& server);

// Where ACL DRYRUN is refused: the real lock scripts on the probe lock (ttl 1 s, released
// at once), reads with harmless arguments. Round 2 takes the fence round 1's acquisition
// gave. The SUBSCRIBE probe (pipelined with UNSUBSCRIBE) is sent last, on its own.
// `before_redis7`: the server is older than Redis 7, which the fleet's reading reaches
// with EVAL and EVALSHA (no EVAL_RO), and where the history's trim by age needs XLEN
// (lock/scripts.hpp, k_history_trim).
[[nodiscard]] std::vector<AclProbe> acl_probe_round1(const ProbeKeys& keys,
                                                     const config::ServerConfig& server,
                                                     const std::string& token,
                                                     bool before_redis7 = false);
[[nodiscard]] std::vector<AclProbe> acl_probe_round2(const ProbeKeys& keys,
                                                     const std::string& token, long long fence);
[[nodiscard]] AclProbe acl_subscribe_probe(const ProbeKeys& keys);

// What an ACL refusal says it refused: a command ("config|get"), a key or a channel,
// named when the server said which. nullopt for a reply that is not an ACL refusal.
struct AclRefusal {
    enum class Kind { command, key, channel } kind;
    std::string name;
};
[[nodiscard]] std::optional<AclRefusal> parse_acl_refusal(std::string_view reply);

// Whether an error reply says the server lacks a command or option it was sent ("ERR
// syntax error", an unknown command or subcommand, a wrong number of arguments), as an
// older server than a script was written for answers.
[[nodiscard]] bool lacks_command(std::string_view reply);

struct AclFinding {
    const AclProbe* probe;
    AclRefusal refusal;
};

// The check: ok when nothing was refused, else what was, what it costs, and the
// ACL SETUSER additions that allow it. `how` says how it was found ("ACL DRYRUN").
[[nodiscard]] Check acl_verdict(std::string_view user, std::string_view how,
                                std::span<const AclFeature> features,
                                std::span<const AclFinding> findings, const ProbeKeys& keys);

} // namespace redlock::doctor
