// `redlock reap`: releases the locks this machine held under an earlier boot
// (lock/reap.hpp), as redlock-reap.service does at boot, says which locks naming this
// machine under another boot it left, and why, and removes the empty cgroups of runs of
// this boot that were killed with their watchdogs (process/cgroup.hpp).

#include <unistd.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "lock/inspect.hpp"
#include "lock/reap.hpp"
#include "process/cgroup.hpp"
#include "redis/fanout.hpp"
#include "util/format.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

namespace redlock::cli {

namespace {

namespace log = util::log;

struct Found {
    std::string name;
    size_t limit = 0;
    lock::Takeover what;
    size_t released = 0; // servers
};

// "'NAME'" or "'NAME' (permit 2 of 3)".
std::string lock_text(const Found& f) {
    return f.what.held.permit > 0
               ? util::format("'{}' (permit {} of {})", f.name, f.what.held.permit, f.limit)
               : util::format("'{}'", f.name);
}

// "held by USER@HOST (pid N, since T, running C) under boot B", escaped for a terminal.
std::string held_text(const lock::Holder& h) {
    return util::printable(
        util::format("held by {}@{} (pid {}, since {}, running {}) under boot {}", h.user, h.host,
                     h.pid, h.acquired_at, h.command, h.boot));
}

} // namespace

int reap_command(const ReapOptions& options, const config::Config& config) {
    const std::vector<std::string> command{"(reap)"};
    const auto here = lock::current_holder(command, static_cast<long>(::getpid()));
    if (here.machine.empty() || here.boot.empty())
        return report({util::ErrorKind::internal,
                       "cannot tell this machine's boot (/etc/machine-id, "
                       "/proc/sys/kernel/random/boot_id): nothing reaped"});
    if (!options.dry_run)
        if (const size_t n = process::remove_dead_runs_cgroups(); n > 0)
            log::note("removed {} empty cgroup{} of runs killed with their watchdogs", n,
                      n == 1 ? "" : "s");
    auto conns = redis::connect_all(config.servers);
    auto names = list_or_say(conns, config.key_prefix, options.pattern);
    if (!names)
        return report(names.error());

    const lock::Reaper by{here, config.history, config.history_max_age};
    std::vector<Found> found;
    std::vector<Found> left; // naming this machine under another boot, not proven dead
    bool unreleased = false;
    for (const auto& name : *names) {
        const auto view = lock::inspect(conns, config.key_prefix, name);
        for (auto& what : lock::takeovers(view, lock::this_boot(here))) {
            Found f{name, view.limit, std::move(what), 0};
            if (!f.what.verdict.take) {
                left.push_back(std::move(f));
                continue;
            }
            if (!options.dry_run) {
                const auto c = lock::tally_of(lock::reap(
                    config.servers, lock::Keys(config.key_prefix, name), view.limit, f.what, by));
                f.released = c.yes;
                // Not released where it is gone already (expired, taken): only a server
                // that failed keeps it.
                unreleased |= c.yes == 0 && c.failed > 0;
            }
            found.push_back(std::move(f));
        }
    }

    std::string out;
    if (options.json) {
        util::JsonWriter json;
        auto write = [&](const std::vector<Found>& list, bool reaped) {
            for (const auto& f : list) {
                const auto& h = f.what.held.holder;
                json.begin_object()
                    .field("name", f.name)
                    .field("permit", f.what.held.permit)
                    .field("token", f.what.held.token)
                    .field("host", h.host)
                    .field("pid", h.pid)
                    .field("user", h.user)
                    .field("command", h.command)
                    .field("acquired_at", h.acquired_at)
                    .field("boot_id", h.boot);
                json.key("renewed_ago_ms");
                if (f.what.lease.renewed_ago)
                    json.value(f.what.lease.renewed_ago->count());
                else
                    json.null();
                if (reaped)
                    json.field("servers", f.released);
                json.field(reaped ? "why" : "why_not", f.what.verdict.why).end_object();
            }
        };
        json.begin_object().field("dry_run", options.dry_run).key("reaped").begin_array();
        write(found, true);
        json.end_array().key("not_reaped").begin_array();
        write(left, false);
        json.end_array().end_object();
        out = json.str() + "\n";
    } else {
        for (const auto& f : found) {
            const std::string where =
                options.dry_run ? std::string()
                : f.released == 0
                    ? "; not released: gone already, or the servers failed"
                    : util::format("; released on {} of {} server{}", f.released,
                                   config.servers.size(), config.servers.size() == 1 ? "" : "s");
            out += util::format("{} {}: {}, {}", options.dry_run ? "would reap" : "reaped",
                                lock_text(f), held_text(f.what.held.holder), f.what.verdict.why) +
                   where + "\n";
        }
        for (const auto& f : left)
            out +=
                util::format("{} {}: {}; {}\n", options.dry_run ? "would not reap" : "not reaped",
                             lock_text(f), held_text(f.what.held.holder), f.what.verdict.why);
        if (found.empty() && left.empty())
            log::note("nothing to reap: no lock matching '{}' is held by this machine under an "
                      "earlier boot",
                      options.pattern);
    }
    if (!out.empty() && !print_stdout(out))
        return util::exit_code::internal;
    if (unreleased)
        return report({util::ErrorKind::unavailable,
                       "some locks of an earlier boot could not be released; they keep their "
                       "ttl"});
    return 0;
}

} // namespace redlock::cli
