#include "job/nested.hpp"

#include <charconv>
#include <cstdlib>
#include <unistd.h>

#include "lock/inspect.hpp"
#include "process/child.hpp"
#include "process/identity.hpp"
#include "redis/fanout.hpp"
#include "util/format.hpp"
#include "util/log.hpp"
#include "util/timestamp.hpp"

namespace redlock::job {

namespace log = util::log;

std::optional<std::string>
nesting_refusal(const lock::Holder& holder, const NestingClaim& claim,
                const std::function<bool(const lock::Holder&)>& descends) {
    if (holder.nest.empty())
        return "its holder gave no nesting secret (another client, or an older redlock)";
    if (claim.secret.empty())
        return util::format("{} is not set", k_nest_secret_variable);
    if (lock::nest_digest(claim.secret) != holder.nest)
        return util::format("{} is not its holder's", k_nest_secret_variable);
    if (holder.host != claim.host)
        return util::format("its holder runs on {}", holder.host);
    // Pids mean nothing across pid namespaces: a container's pid 7 is not the host's.
    if (holder.pid_ns.empty() || holder.pid_ns != claim.pid_ns)
        return "its holder runs in another pid namespace";
    if (holder.process.empty() || !descends(holder))
        return util::format("its holder, pid {}, is not an ancestor of this process", holder.pid);
    return std::nullopt;
}

namespace {

// Whether the holder's process (for `run`, the holding redlock; for `acquire`, the
// script that ran it) is an ancestor of this process, and that very process, not a later
// one with its pid: it started by the time the holder recorded (process/identity.hpp).
bool descends_from(const lock::Holder& h) {
    long long boottime = -1;
    const auto& text = h.process;
    if (std::from_chars(text.data(), text.data() + text.size(), boottime).ptr !=
        text.data() + text.size())
        return false;
    auto wall = util::parse_utc_timestamp(h.acquired_at);
    return wall && process::is_ancestor_running_at(static_cast<pid_t>(h.pid), boottime,
                                                   wall->time_since_epoch().count());
}

} // namespace

std::optional<RunResult> run_nested(const RunSpec& options, const config::Config& config,
                                    Observer& observer) {
    const char* key = std::getenv("REDLOCK_KEY");
    const char* token = std::getenv("REDLOCK_TOKEN");
    if (!key || !token || !*token || options.name != key)
        return std::nullopt;
    auto conns = redis::connect_all(config.servers);
    auto view = lock::inspect(conns, config.key_prefix, options.name, true);
    // The lock itself, or one permit of a semaphore (--limit).
    auto ours = [&](const lock::LockView& v) {
        return v.state == lock::LockState::held && v.token == token;
    };
    const lock::LockView* held = ours(view) ? &view : nullptr;
    for (const auto& permit : view.permits)
        if (ours(permit))
            held = &permit;
    if (!held) {
        log::verbose("'{}': the REDLOCK_TOKEN inherited does not hold it on these servers "
                     "({}); acquiring it",
                     options.name, lock::state_name(view.state));
        return std::nullopt;
    }
    const lock::Holder* holder = held->holder ? &*held->holder : nullptr;
    for (const auto& s : held->servers)
        if (!holder && s.token == token && s.holder)
            holder = &*s.holder;
    char host[256] = {};
    (void)::gethostname(host, sizeof host - 1);
    const char* secret = std::getenv(k_nest_secret_variable);
    const std::string pid_ns = std::to_string(process::pid_namespace());
    const NestingClaim claim{secret ? secret : "", host, pid_ns};
    const auto refused = holder ? nesting_refusal(*holder, claim, descends_from)
                                : std::optional<std::string>("its metadata is missing");
    if (refused) {
        observer.notice(util::format("'{}': REDLOCK_TOKEN holds it, but this process is not "
                                     "proven to run inside its holder: {}; taking it as an "
                                     "ordinary run",
                                     options.name, *refused));
        return std::nullopt;
    }
    if (options.max_hold || options.min_hold || options.once_per)
        observer.notice(util::format("'{}' is held by the run this one is nested in; --max-hold, "
                                     "--min-hold and --once-per apply to that run, not here",
                                     options.name));
    // The fence is the outer run's. The inherited REDLOCK_FENCE is taken when a server
    // that answered records it for this token (one always does: the servers that have the
    // fence are a majority); else, the environment edited, the one a majority records.
    std::optional<long long> fence;
    if (const char* inherited = std::getenv("REDLOCK_FENCE")) {
        long long value = 0;
        const std::string_view text(inherited);
        if (std::from_chars(text.data(), text.data() + text.size(), value).ptr ==
            text.data() + text.size())
            for (const auto& s : held->servers)
                if (s.token == token && s.holder_fence == value)
                    fence = value;
    }
    if (!fence)
        fence = held->fence;
    if (!fence)
        return RunResult{
            .outcome = Outcome::failed,
            .error = util::Error{util::ErrorKind::unavailable,
                                 "cannot tell the fence of the run this one is nested in: too "
                                 "few servers answered to agree on it, and REDLOCK_FENCE is not "
                                 "one they record; PROGRAM not started"}};
    ::setenv("REDLOCK_FENCE", std::to_string(*fence).c_str(), 1);
    log::verbose("'{}' is held by the run this one is nested in (fence {}); running PROGRAM "
                 "under it",
                 options.name, *fence);
    return RunResult{.outcome = Outcome::failed, .error = process::exec_in_place(options.program)};
}

} // namespace redlock::job
