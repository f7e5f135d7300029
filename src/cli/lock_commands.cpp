// acquire, extend and release: the lock as primitives for shell scripts, plus the
// operator's forced release.

#include <algorithm>
#include <cstdio>
#include <fcntl.h>
#include <unistd.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/stderr_observer.hpp"
#include "job/nested.hpp"
#include "lock/holder.hpp"
#include "lock/inspect.hpp"
#include "lock/name.hpp"
#include "redis/fanout.hpp"
#include "util/fd.hpp"
#include "util/format.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/random.hpp"
#include "util/text.hpp"

namespace redlock::cli {

namespace {

namespace log = util::log;
using Vote = lock::ServerResult::Vote;

// The command line of the process that ran `redlock acquire` (the script that will hold the
// lock), from /proc; empty if it cannot be read.
std::vector<std::string> parent_command() {
    auto path = util::format("/proc/{}/cmdline", static_cast<long>(::getppid()));
    util::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    std::vector<std::string> words;
    if (!fd)
        return words;
    std::string data;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd.get(), buf, sizeof buf)) > 0 && data.size() < size_t{64} * 1024)
        data.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    while (start < data.size()) {
        auto end = data.find('\0', start);
        if (end == std::string::npos)
            end = data.size();
        words.push_back(data.substr(start, end - start));
        start = end + 1;
    }
    return words;
}

// Asks on the terminal; anything but y/yes declines.
bool confirm(const std::string& question) {
    std::string prompt = "redlock: " + question + " [y/N] ";
    ssize_t ignored = ::write(STDERR_FILENO, prompt.data(), prompt.size());
    (void)ignored;
    std::string answer;
    char c;
    while (::read(STDIN_FILENO, &c, 1) == 1 && c != '\n')
        answer.push_back(c);
    return answer == "y" || answer == "Y" || answer == "yes" || answer == "YES";
}

// The token of a lock just acquired could not be written: nobody could ever release or
// extend it, so it must not stay held for its whole TTL.
int give_back(lock::Lock& lock, const std::string& name) {
    size_t released = 0;
    for (const auto& r : lock.release())
        released += r.vote == Vote::yes;
    if (released > 0)
        log::error("released '{}' again: its token could not be written", name);
    else
        log::error("could not release '{}' again: it stays held until its ttl runs out", name);
    return util::exit_code::internal;
}

} // namespace

int acquire_command(const AcquireOptions& options, const config::Config& config) {
    auto signals = process::SignalEvents::open();
    if (!signals)
        return report(signals.error());
    auto command = parent_command();
    if (command.empty())
        command = {"(redlock acquire)"};
    // The holder is the script that asked: redlock itself exits right away.
    auto holder =
        lock::current_holder(command, static_cast<long>(::getppid()), job::known_secrets(config));
    holder.ttl_ms = options.ttl.count();
    // For a `run` nested in the script (job/nested.hpp): printed by --shell and --json.
    const auto nest_secret = util::random_token();
    holder.nest = lock::nest_digest(nest_secret);
    auto token = util::random_token();
    auto lock = job::make_lock(config, options.name, token, options.ttl,
                               lock::holder_fields(holder, token));
    StderrObserver observer(options.name);
    const job::WaitPolicy policy{.wait = options.wait,
                                 .fair = options.fair,
                                 .min_validity = std::nullopt,
                                 .history_keep = config.history,
                                 .history_max_age = config.history_max_age};
    auto acquired = job::acquire(lock, options.name, policy, *signals, observer);
    if (auto status = unless_acquired(acquired, options.conflict_exit_code))
        return *status;
    token = lock.token(); // each attempt has its own: the one that acquired
    std::string out;
    if (options.json) {
        util::JsonWriter json;
        json.begin_object()
            .field("name", options.name)
            .field("key", lock.key())
            .field("token", token)
            .field("fence", lock.fence())
            .field("ttl_ms", options.ttl.count())
            .field("acquired_at", lock.holder_field("acquired_at"))
            .field("nest_secret", nest_secret)
            .end_object();
        out = json.str();
    } else if (options.shell) {
        // The variables `run` gives PROGRAM; names and hex tokens need no quoting, but the
        // quotes keep that true whatever a name may hold one day.
        out = util::format("REDLOCK_KEY='{}'; export REDLOCK_KEY\n"
                           "REDLOCK_TOKEN='{}'; export REDLOCK_TOKEN\n"
                           "REDLOCK_FENCE='{}'; export REDLOCK_FENCE\n"
                           "{}='{}'; export {}\n",
                           options.name, token, lock.fence(), job::k_nest_secret_variable,
                           nest_secret, job::k_nest_secret_variable);
    } else {
        // The token alone on its line, as 0.1 printed it: `tok=$(redlock acquire NAME)`.
        out = token + "\n";
    }
    if (!print_stdout(out))
        return give_back(lock, options.name);
    return 0;
}

namespace {

// extend and release with a token that no longer holds the lock: one message for both.
int not_held_with_token(std::string_view name) {
    log::note("lock '{}' is not held with that token (released, expired or taken over)", name);
    return util::exit_code::conflict;
}

// A token of a semaphore's permit (--limit): the name's key is then the set of permit
// holders, which the plain scripts find of the wrong type. Points `lock` at the permit the
// token holds on some server (at the first one if it holds none: then it is simply not
// held) and returns true; false if the name is no semaphore.
bool find_permit(lock::Lock& lock, const std::vector<lock::ServerResult>& round,
                 const std::string& prefix, const std::string& name, const std::string& token) {
    if (std::ranges::none_of(round, [](const lock::ServerResult& s) {
            return s.error == redis::ErrorCode::wrongtype;
        }))
        return false;
    auto view = lock::inspect(lock.connections(), prefix, name);
    for (size_t i = 0; i < view.permits.size(); ++i)
        for (const auto& s : view.permits[i].servers)
            if (s.token == token) {
                lock.set_limit(view.limit);
                lock.use_permit(i + 1);
                return true;
            }
    if (view.limit == 0)
        return false;
    lock.set_limit(view.limit);
    return true;
}

} // namespace

int extend_command(const ExtendOptions& options, const config::Config& config) {
    auto lock = job::make_lock(config, options.name, options.token, options.ttl);
    auto status = lock.extend(options.ttl);
    if (status != lock::RenewStatus::renewed &&
        find_permit(lock, lock.last_round(), config.key_prefix, options.name, options.token))
        status = lock.extend(options.ttl);
    switch (status) {
    case lock::RenewStatus::renewed:
        log::verbose("extended '{}' to {}: {}", options.name, human_duration(options.ttl),
                     lock::describe_round(lock.last_round()));
        return 0;
    case lock::RenewStatus::not_ours:
        return not_held_with_token(options.name);
    default: {
        // Every server waited for (Lock::extend): an outage (69) is only too few servers
        // answering, never a refusal.
        const auto c = lock::tally_of(lock.last_round());
        if (c.answered() >= c.majority())
            return not_held_with_token(options.name);
        auto error = lock::quorum_error(lock.last_round());
        return report(
            util::Error{error.kind, util::format("cannot extend '{}': {}; extended on {} of {}",
                                                 options.name, error.message, c.yes, c.total)});
    }
    }
}

int release_command(const ReleaseOptions& options, const config::Config& config) {
    if (!options.force) {
        auto lock = job::make_lock(config, options.name, options.token, config.ttl);
        auto results = lock.release();
        if (find_permit(lock, results, config.key_prefix, options.name, options.token))
            results = lock.release();
        const auto c = lock::tally_of(results);
        // Deleted wherever our token was found is success: elsewhere the key expires by its
        // ttl, a retry would reach those servers no sooner, and 69 would say the opposite.
        if (c.yes > 0) {
            note_release(options.name, results);
            return 0;
        }
        if (c.answered() >= c.majority() || c.answered() == c.total)
            return not_held_with_token(options.name);
        auto error = lock::quorum_error(results);
        return report(util::Error{
            error.kind, util::format("cannot release '{}': {}", options.name, error.message)});
    }

    auto conns = redis::connect_all(config.servers);
    auto view = lock::inspect(conns, config.key_prefix, options.name);
    if (view.reachable == 0)
        return report(lock::unreadable_error(view.servers));
    size_t holding = 0;
    bool wrong_type = false;
    for (const auto& s : view.servers) {
        holding += s.token.has_value() || s.wrong_type;
        wrong_type |= s.wrong_type;
    }
    if (holding == 0) {
        log::note("lock '{}' is free; nothing to release", options.name);
        return 0;
    }
    // Shown on a terminal: what the holder wrote goes through util::printable.
    const size_t permits_held = view.held_permits().size();
    std::string who =
        view.limit > 0 ? util::format("{} holder{} of its {} permits (--limit {})", permits_held,
                                      permits_held == 1 ? "" : "s", view.limit, view.limit)
        : view.holder
            ? util::printable(util::format("{}@{} (pid {}, since {}, running {})",
                                           view.holder->user, view.holder->host, view.holder->pid,
                                           view.holder->acquired_at, view.holder->command))
        : wrong_type && !view.token ? std::string("a key that is not a redlock lock (wrong type)")
                                    : std::string("an unknown owner");
    if (!options.yes && ::isatty(STDIN_FILENO) &&
        !confirm(util::format("release lock '{}' held by {}?", options.name, who))) {
        log::note("lock '{}' left as it is", options.name);
        return util::exit_code::conflict;
    }
    // Who forces it, for the holder's message and the history: the operator.
    const std::vector<std::string> command{"(release --force)"};
    const auto me = lock::current_holder(command, static_cast<long>(::getpid()));
    lock::ForceRelease by{me.host, me.pid, me.user, std::nullopt};
    { // recorded with history = 0 too: the counters count it (no entry is kept)
        lock::HistoryRecord record;
        record.keep = config.history;
        record.max_age = config.history_max_age;
        record.add("run", util::random_token().substr(0, 16));
        record.add("host", me.host);
        record.add("pid", std::to_string(me.pid));
        record.add("user", me.user);
        record.add("command", "(release --force)");
        record.add("outcome", "force-release");
        if (view.holder) {
            record.add("by_host", view.holder->host);
            record.add("by_pid", std::to_string(view.holder->pid));
            record.add("by_user", view.holder->user);
        }
        by.record = std::move(record);
    }
    size_t deleted = lock::force_release(conns, view, by);
    std::string tokens;
    for (const auto& s : view.servers)
        if (s.token && tokens.find(*s.token) == std::string::npos)
            tokens += (tokens.empty() ? "" : ", ") + util::printable(*s.token);
    const std::string where = view.servers.size() == 1 ? std::string()
                                                       : util::format(" on {} of {} servers",
                                                                      deleted, view.servers.size());
    bool printed =
        print_stdout(util::format("released '{}'{}: held by {}{}\n", options.name, where, who,
                                  tokens.empty() ? std::string() : ", token " + tokens));
    if (deleted < holding)
        log::note("the lock changed on {} server{} while it was being released; run status again",
                  holding - deleted, holding - deleted == 1 ? "" : "s");
    return printed ? 0 : util::exit_code::internal;
}

} // namespace redlock::cli
