// status and list: read-only views of locks, merged across servers.

#include <algorithm>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "lock/inspect.hpp"
#include "redis/fanout.hpp"
#include "util/duration.hpp"
#include "util/format.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/text.hpp"
#include "util/timestamp.hpp"

namespace redlock::cli {

namespace {

using Millis = std::chrono::milliseconds;
namespace log = util::log;

const char* server_state(const lock::ServerView& s) {
    if (!s.reachable)
        return s.auth_error ? "refused" : "unreachable";
    if (s.wrong_type)
        return "wrong_type";
    return s.token ? "held" : "free";
}

constexpr const char* k_wrong_type_text = "not a redlock lock (wrong type)";

void write_holder(util::JsonWriter& json, const std::optional<lock::Holder>& holder) {
    json.key("holder");
    if (!holder) {
        json.null();
        return;
    }
    json.begin_object()
        .field("host", holder->host)
        .field("pid", holder->pid)
        .field("user", holder->user)
        .field("command", holder->command)
        .field("acquired_at", holder->acquired_at)
        .field("ttl_ms", holder->ttl_ms);
    // Which machine and boot (redlock reap): null when the holder did not say.
    auto known = [](const std::string& s) {
        return s.empty() ? std::nullopt : std::optional<std::string>(s);
    };
    json.field("machine_id", known(holder->machine)).field("boot_id", known(holder->boot));
    json.end_object();
}

util::UtcMillis utc(long long unix_ms) {
    return util::UtcMillis(Millis(unix_ms));
}

void write_last_run(util::JsonWriter& json, const std::optional<lock::LastRun>& run) {
    json.key("last_run");
    if (!run) {
        json.null();
        return;
    }
    json.begin_object()
        .field("slot_start", util::format_utc_timestamp(utc(run->slot * run->slot_ms)))
        .field("slot_ms", run->slot_ms)
        .field("host", run->who.host)
        .field("pid", run->who.pid)
        .field("user", run->who.user)
        .field("command", run->who.command)
        .field("started_at", util::format_utc_timestamp(utc(run->started_ms)));
    json.key("ended_at");
    if (run->ended_ms)
        json.value(util::format_utc_timestamp(utc(*run->ended_ms)));
    else
        json.null();
    json.key("exit_status");
    if (run->status)
        json.value(*run->status);
    else
        json.null();
    json.field("start_error", run->start_error);
    json.end_object();
}

// Enough of a token to tell holders apart, not the token: `extend --token` and `release
// --token` act with it, and status output is pasted into tickets and CI logs. Whoever may
// read the servers can still GET it; nobody else needs it (a script has its own, from
// `acquire`), and a copied one no longer makes a nested run (run_command.cpp).
constexpr size_t k_token_shown = 8;

std::optional<std::string> token_prefix(const std::optional<std::string>& token) {
    if (!token)
        return token;
    return token->substr(0, k_token_shown);
}

void write_view(util::JsonWriter& json, const lock::LockView& view) {
    json.begin_object()
        .field("name", view.name)
        .field("key", view.key)
        .field("state", lock::state_name(view.state))
        .field("wrong_type", view.wrong_type);
    json.key("ttl_ms");
    if (view.state == lock::LockState::held)
        json.value(view.ttl_ms);
    else
        json.null();
    json.field("token_prefix", token_prefix(view.token));
    json.key("fence");
    if (view.fence)
        json.value(*view.fence);
    else
        json.null();
    write_holder(json, view.holder);
    write_last_run(json, view.last_run);
    json.key("latest_run");
    if (view.latest_run)
        write_history_run(json, *view.latest_run);
    else
        json.null();
    json.key("limit");
    if (view.limit > 0)
        json.value(static_cast<long long>(view.limit));
    else
        json.null();
    json.key("permits").begin_array();
    for (const auto& permit : view.permits)
        write_view(json, permit);
    json.end_array();
    json.key("servers").begin_array();
    for (const auto& s : view.servers) {
        json.begin_object().field("server", s.server).field("state", server_state(s));
        json.field("token_prefix", token_prefix(s.token));
        json.key("fence");
        if (s.fence)
            json.value(*s.fence);
        else
            json.null();
        json.key("ttl_ms");
        if (s.token || s.wrong_type)
            json.value(s.ttl_ms);
        else
            json.null();
        json.key("error");
        if (s.reachable)
            json.null();
        else
            json.value(s.error);
        json.end_object();
    }
    json.end_array().end_object();
}

// Text output shows what servers and other clients wrote through util::printable: a
// newline or an escape sequence in a command line must not forge a line or drive the
// terminal.
std::string ttl_text(long long ttl_ms) {
    return ttl_ms == -1 ? std::string("no expiry") : human_duration(Millis(ttl_ms)) + " left";
}

void print_view(std::string& out, const lock::LockView& view);

// A semaphore: how many permits are held, then each permit as a lock of its own.
void print_semaphore(std::string& out, const lock::LockView& view) {
    out += util::format("{}: {} of {} permits held (--limit {})\n", view.name,
                        view.held_permits().size(), view.limit, view.limit);
    for (size_t i = 0; i < view.permits.size(); ++i) {
        auto permit = view.permits[i];
        permit.name = util::format("permit {}", i + 1);
        std::string text;
        print_view(text, permit);
        for (size_t at = 0; at < text.size();) {
            auto end = text.find('\n', at);
            out += "  " + text.substr(at, end - at + 1);
            at = end + 1;
        }
    }
}

void print_view(std::string& out, const lock::LockView& view) {
    if (view.limit > 0)
        return print_semaphore(out, view);
    switch (view.state) {
    case lock::LockState::free:
        if (view.fence)
            out += util::format("{}: free (last fence {})\n", view.name, *view.fence);
        else
            out += util::format("{}: free\n", view.name);
        break;
    case lock::LockState::unknown:
        if (view.reachable < lock::majority_of(view.servers.size()))
            out += util::format("{}: unknown (only {} of {} servers answered)\n", view.name,
                                view.reachable, view.servers.size());
        else
            out += util::format("{}: unknown (no token is held on a majority of the {} servers)\n",
                                view.name, view.servers.size());
        break;
    case lock::LockState::held:
        if (view.wrong_type) {
            // Some other program wrote another type of value under the lock's key: nothing
            // can take the lock until that key is gone (release --force removes it).
            out +=
                util::format("{}: {}, {}\n", view.name, k_wrong_type_text, ttl_text(view.ttl_ms));
            break;
        }
        out += util::format("{}: held by {}, {}\n", view.name, holder_text(view.holder),
                            ttl_text(view.ttl_ms));
        if (view.holder) {
            out += util::format("  command   {}\n", util::printable(view.holder->command));
            // No age for a time that is not one, or in the future (a host clock ahead).
            auto age = age_of(view.holder->acquired_at);
            out += util::format("  since     {}{}\n", util::printable(view.holder->acquired_at),
                                age && age->count() >= 0 ? " (held " + human_duration(*age) + ")"
                                                         : std::string());
            out += util::format("  lease     {}\n", human_duration(Millis(view.holder->ttl_ms)));
        }
        out += util::format("  token     {}{}\n", util::printable(*token_prefix(view.token)),
                            view.token->size() > k_token_shown ? "..." : "");
        if (view.fence)
            out += util::format("  fence     {}\n", *view.fence);
        break;
    }
    if (const auto& run = view.latest_run)
        out += util::format("  last run  {}\n", history_last_text(*run));
    if (const auto& run = view.last_run) {
        out += util::format("  slot      the {} slot from {}\n",
                            util::format_duration(Millis(run->slot_ms)),
                            util::format_utc_timestamp(utc(run->slot * run->slot_ms)));
        out += util::format("            by {}, started {}\n", holder_text(run->who),
                            util::format_utc_timestamp(utc(run->started_ms)));
        if (run->start_error)
            out += util::format("            did not start (exit status {}): {}; the slot stays "
                                "open\n",
                                run->status ? std::to_string(*run->status) : "unknown",
                                util::printable(*run->start_error));
        else if (run->ended_ms && run->status)
            out += util::format("            ended after {}, exit status {}\n",
                                human_duration(Millis(*run->ended_ms - run->started_ms)),
                                *run->status);
        else
            out += "            not ended (running, or it stopped without saying)\n";
    }
    if (view.servers.size() > 1 || view.reachable == 0) {
        out += "  servers\n";
        for (const auto& s : view.servers) {
            if (!s.reachable)
                out += util::format("    {:<22} {}: {}\n", s.server, server_state(s),
                                    util::printable(s.error));
            else if (s.wrong_type)
                out += util::format("    {:<22} {} {}\n", s.server, k_wrong_type_text,
                                    ttl_text(s.ttl_ms));
            else if (!s.token)
                out += util::format("    {:<22} free\n", s.server);
            else // "other token" only when there is a lock token for it to differ from
                out += util::format("    {:<22} {} {}\n", s.server,
                                    !view.token || s.token == view.token ? "held" : "other token",
                                    ttl_text(s.ttl_ms));
        }
    }
}

// status and list print the same document: {"locks": [...]}.
std::string locks_json(const std::vector<lock::LockView>& views) {
    util::JsonWriter json;
    json.begin_object().key("locks").begin_array();
    for (const auto& v : views)
        write_view(json, v);
    json.end_array().end_object();
    return json.str();
}

} // namespace

int status_command(const StatusOptions& options, const config::Config& config) {
    auto conns = redis::connect_all(config.servers);
    std::vector<lock::LockView> views;
    for (const auto& name : options.names) {
        views.push_back(lock::inspect(conns, config.key_prefix, name));
        if (config.history > 0) {
            auto read = lock::read_history(conns, lock::Keys(config.key_prefix, name), 1);
            if (!read.runs.empty())
                views.back().latest_run = read.runs.front();
        }
    }

    // No server could be read: the error says so once, and stdout carries nothing that
    // looks like a result.
    for (const auto& v : views)
        if (v.reachable == 0)
            return report(lock::unreadable_error(v.servers));
    std::string out;
    if (options.json) {
        out = locks_json(views);
    } else {
        for (const auto& v : views)
            print_view(out, v);
    }
    if (!print_stdout(out))
        return util::exit_code::internal;
    return 0;
}

int list_command(const ListOptions& options, const config::Config& config) {
    auto conns = redis::connect_all(config.servers);
    auto names = list_or_say(conns, config.key_prefix, options.pattern);
    if (!names)
        return report(names.error());
    std::vector<lock::LockView> views;
    for (const auto& name : *names) {
        auto view = lock::inspect(conns, config.key_prefix, name);
        // A minority of stale keys is not a held lock (it can be acquired); skip those.
        if (view.state != lock::LockState::free)
            views.push_back(std::move(view));
    }

    std::string out;
    if (options.json) {
        out = locks_json(views);
    } else {
        out += util::format("{:<24} {:<9} {:<22} {:<8} {}\n", "NAME", "TTL", "HOLDER", "HELD",
                            "COMMAND");
        for (const auto& v : views) {
            std::string holder =
                v.limit > 0 ? util::format("({} of {} permits)", v.held_permits().size(), v.limit)
                : v.state == lock::LockState::unknown ? "(unknown state)"
                : v.wrong_type                        ? "(wrong type)"
                : v.holder ? util::printable(util::format("{}@{}:{}", v.holder->user,
                                                          v.holder->host, v.holder->pid))
                           : std::string("unknown");
            std::optional<Millis> age;
            if (v.holder)
                age = age_of(v.holder->acquired_at);
            out += util::format(
                "{:<24} {:<9} {:<22} {:<8} {}\n", v.name,
                v.state == lock::LockState::held ? human_duration(Millis(v.ttl_ms)) : "-",
                util::clip(holder, 22), age ? human_duration(*age) : std::string("-"),
                v.holder ? util::clip(util::printable(v.holder->command), 80 - 24 - 9 - 22 - 8 - 4)
                         : std::string("-"));
        }
    }
    if (!print_stdout(out))
        return util::exit_code::internal;
    return 0;
}

} // namespace redlock::cli
