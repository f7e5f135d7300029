#include "lock/history.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <map>

#include "lock/round.hpp"
#include "lock/scripts.hpp"
#include "redis/fanout.hpp"
#include "redis/reply.hpp"
#include "util/format.hpp"

namespace redlock::lock {

namespace {

std::optional<long long> number(const std::string& text) {
    long long value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size())
        return std::nullopt;
    return value;
}

} // namespace

std::optional<HistoryEntry>
parse_history_entry(const std::vector<std::pair<std::string, std::string>>& fields) {
    HistoryEntry e;
    bool has_run = false;
    for (const auto& [name, value] : fields) {
        if (name == "run") {
            e.run = value;
            has_run = !value.empty();
        } else if (name == "started_ms") {
            e.started_ms = number(value).value_or(0);
        } else if (name == "host") {
            e.host = value;
        } else if (name == "pid") {
            e.pid = number(value).value_or(0);
        } else if (name == "user") {
            e.user = value;
        } else if (name == "command") {
            e.command = value;
        } else if (name == "outcome") {
            e.outcome = value;
        } else if (name == "status") {
            if (auto n = number(value); n && *n >= 0 && *n <= 255)
                e.exit_status = static_cast<int>(*n);
        } else if (name == "waited_ms") {
            e.waited_ms = number(value).value_or(0);
        } else if (name == "held_ms") {
            e.held_ms = number(value).value_or(0);
        } else if (name == "fence") {
            e.fence = number(value);
        } else if (name == "by_host") {
            e.by_host = value;
        } else if (name == "by_pid") {
            e.by_pid = number(value);
        } else if (name == "by_user") {
            e.by_user = value;
        } else if (name == "note") {
            e.note = value;
        }
    }
    if (!has_run || e.outcome.empty())
        return std::nullopt;
    return e;
}

std::string history_command(const Keys& keys, const std::string& token,
                            const HistoryRecord& record) {
    // Built as one argv of views: this goes with every release.
    const std::string keep = std::to_string(record.keep);
    const std::string age = std::to_string(record.max_age.count());
    const std::string waited = std::to_string(std::max<long long>(record.waited.count(), 0));
    const std::string held = std::to_string(std::max<long long>(record.held.count(), 0));
    std::vector<std::string_view> argv{"EVAL",
                                       k_history_script.source,
                                       "3",
                                       keys.history,
                                       keys.lock,
                                       keys.meta,
                                       record.skip ? "skip" : "run",
                                       token,
                                       keep,
                                       age,
                                       waited,
                                       held,
                                       record.fields};
    return redis::encode_command(argv);
}

HistoryRead read_history(std::span<redis::Connection> conns, const Keys& keys, size_t count) {
    const auto n = std::to_string(std::max<size_t>(count, 1));
    const std::array<std::string_view, 6> argv{"XREVRANGE", keys.history, "+", "-", "COUNT", n};
    redis::request_all(conns, redis::encode_command(argv));
    HistoryRead out;
    std::map<std::string, HistoryEntry> by_run;
    for (const auto& c : conns) {
        const auto& outcome = c.outcome();
        if (!outcome || outcome->failure || !outcome->reply) {
            out.failures.push_back(
                util::format("{}: {}", c.name(),
                             outcome && outcome->failure ? outcome->failure->detail : "no answer"));
            out.auth_error |=
                outcome && outcome->failure && outcome->failure->kind == redis::FailureKind::auth;
            continue;
        }
        const redisReply& reply = *outcome->reply;
        if (redis::is_error(reply)) {
            out.auth_error |= redis::is_auth_error(reply);
            const bool wrong = redis::error_code(redis::text(reply)) == redis::ErrorCode::wrongtype;
            out.failures.push_back(
                wrong ? util::format("{}: {} is not a history (a key of another type)", c.name(),
                                     keys.history)
                      : util::format("{}: {}", c.name(), redis::text(reply)));
            continue;
        }
        ++out.answered;
        if (reply.type != REDIS_REPLY_ARRAY)
            continue;
        // [[id, [field, value, ...]], ...]
        for (size_t i = 0; i < reply.elements; ++i) {
            const redisReply& item = *reply.element[i];
            if (item.type != REDIS_REPLY_ARRAY || item.elements != 2 ||
                item.element[1]->type != REDIS_REPLY_ARRAY)
                continue;
            const redisReply& list = *item.element[1];
            std::vector<std::pair<std::string, std::string>> fields;
            for (size_t j = 0; j + 1 < list.elements; j += 2)
                fields.emplace_back(std::string(redis::text(*list.element[j])),
                                    std::string(redis::text(*list.element[j + 1])));
            auto entry = parse_history_entry(fields);
            if (!entry)
                continue;
            // The same run written to several servers: one entry, the earliest start (the
            // servers' clocks differ a little).
            auto [it, inserted] = by_run.emplace(entry->run, *entry);
            if (!inserted && entry->started_ms < it->second.started_ms)
                it->second.started_ms = entry->started_ms;
        }
    }
    for (auto& [run, entry] : by_run)
        out.runs.push_back(std::move(entry));
    std::ranges::sort(out.runs, [](const HistoryEntry& a, const HistoryEntry& b) {
        return a.started_ms != b.started_ms ? a.started_ms > b.started_ms : a.run > b.run;
    });
    if (out.runs.size() > count)
        out.runs.resize(count);
    return out;
}

} // namespace redlock::lock
