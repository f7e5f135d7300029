#pragma once
// A run started inside a run of the same NAME (flock's FLOCKER idiom) runs PROGRAM under
// the outer lock: taking it again would wait on itself forever. Its environment names the
// lock (REDLOCK_KEY), the outer run's token (REDLOCK_TOKEN) and the secret the outer run
// (or `acquire --shell`) gave PROGRAM's tree (REDLOCK_NEST_SECRET). The token proves
// nothing: it is the lock key's value, which whoever can read the servers reads. The
// secret never leaves the host: the holder's metadata keeps only its digest, with the
// holder's host, pid namespace and pid. A run that cannot show all of them is an ordinary
// run, which waits its turn.

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "job/events.hpp"
#include "job/run.hpp"
#include "lock/holder.hpp"

namespace redlock::job {

inline constexpr char k_nest_secret_variable[] = "REDLOCK_NEST_SECRET";

// What this process shows of its ancestry: the secret it inherited ("" if none), and
// where it runs (host name, pid namespace as lock::Holder::pid_ns writes it).
struct NestingClaim {
    std::string_view secret;
    std::string_view host;
    std::string_view pid_ns;
};

// Why this process is not proven to run inside `holder`, which holds the lock with the
// inherited token; nullopt when it is. `descends` checks that the holder's process is an
// ancestor of this one (process::is_ancestor_running_at), asked last.
[[nodiscard]] std::optional<std::string>
nesting_refusal(const lock::Holder& holder, const NestingClaim& claim,
                const std::function<bool(const lock::Holder&)>& descends);

// A nested run: PROGRAM replaces redlock at once under the outer lock, and this returns
// only when exec failed. nullopt when this run is not nested (an ordinary run follows),
// with a note saying why where the environment looked nested.
[[nodiscard]] std::optional<RunResult> run_nested(const RunSpec& options,
                                                  const config::Config& config, Observer& observer);

} // namespace redlock::job
