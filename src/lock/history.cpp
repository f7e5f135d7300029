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
#include "util/timestamp.hpp"

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
            e.started_ms = util::plausible_ms(number(value));
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
            e.waited_ms = util::plausible_ms(number(value));
        } else if (name == "held_ms") {
            e.held_ms = util::plausible_ms(number(value));
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
        } else if (name == "slot") {
            e.slot_ms = util::plausible_ms(number(value));
        }
    }
    if (!has_run || e.outcome.empty())
        return std::nullopt;
    return e;
}

std::string history_command(const Keys& keys, const std::string& token,
                            const HistoryRecord& record) {
    if (record.keep == 0)
        return {};
    // Built as one argv of views: this goes with every release.
    const std::string keep = std::to_string(record.keep);
    const std::string age = std::to_string(record.max_age.count());
    const std::string waited = std::to_string(std::max<long long>(record.waited.count(), 0));
    const std::string held = std::to_string(std::max<long long>(record.held.count(), 0));
    // As ms since the Unix epoch; "": when it arrives (k_history_script).
    std::string ended;
    if (record.ended) {
        const auto wall = std::chrono::system_clock::now() - (redis::Clock::now() - *record.ended);
        ended = std::to_string(
            std::chrono::floor<std::chrono::milliseconds>(wall.time_since_epoch()).count());
    }
    std::vector<std::string_view> argv{"EVAL",
                                       k_history_script.source,
                                       "3",
                                       keys.record,
                                       keys.lock,
                                       keys.meta,
                                       record.skip ? "skip" : "run",
                                       token,
                                       keep,
                                       age,
                                       waited,
                                       held,
                                       record.fields,
                                       ended};
    const std::string keep_until =
        record.keep_until_ms ? std::to_string(*record.keep_until_ms) : std::string();
    if (record.keep_until_ms)
        argv.push_back(keep_until);
    return redis::encode_command(argv);
}

namespace {

// Where one server's reading is: the page to ask for next.
struct Cursor {
    std::string from = "+"; // read back from this entry's number (inclusive)
    std::string last;       // the previous page's last number
    size_t runs = 0;        // runs read
    bool done = false;
};

std::string page_call(const Keys& keys, const Cursor& cursor, size_t count, bool by_sha) {
    const auto n = std::to_string(std::min(count - cursor.runs, k_history_page_entries));
    return script_call(
        k_history_page_script, by_sha, {keys.record},
        {cursor.from, n, std::to_string(k_max_history_entry), std::to_string(k_max_history_page)});
}

// Why server `c` could not be read, or nullopt when `reply` can be.
std::optional<std::string> unreadable(const redis::Connection& c, const Keys& keys,
                                      HistoryRead& out) {
    const auto& outcome = c.outcome();
    if (!outcome || outcome->failure || !outcome->reply) {
        out.auth_error |=
            outcome && outcome->failure && outcome->failure->kind == redis::FailureKind::auth;
        return util::format("{}: {}", c.name(),
                            outcome && outcome->failure ? outcome->failure->detail : "no answer");
    }
    const redisReply& reply = *outcome->reply;
    if (redis::is_error(reply)) {
        out.auth_error |= redis::is_auth_error(reply);
        if (redis::error_code(redis::text(reply)) == redis::ErrorCode::wrongtype ||
            redis::text(reply).find("WRONGTYPE") != std::string_view::npos)
            return util::format("{}: {} is not a name's record (a key of another type)", c.name(),
                                keys.record);
        return util::format("{}: {}", c.name(), redis::text(reply));
    }
    if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 2 ||
        reply.element[0]->type != REDIS_REPLY_INTEGER ||
        reply.element[1]->type != REDIS_REPLY_ARRAY)
        return util::format("{}: unexpected reply {}", c.name(), redis::describe(reply));
    return std::nullopt;
}

} // namespace

HistoryRead read_history(std::span<redis::Connection> conns, const Keys& keys, size_t count) {
    count = std::max<size_t>(count, 1);
    HistoryRead out;
    std::map<std::string, HistoryEntry> by_run;
    std::vector<Cursor> cursors(conns.size());
    for (;;) {
        auto now = redis::Clock::now();
        bool asked = false;
        for (size_t i = 0; i < conns.size(); ++i)
            if (!cursors[i].done) {
                conns[i].start(page_call(keys, cursors[i], count, true),
                               page_call(keys, cursors[i], count, false), now);
                asked = true;
            }
        if (!asked)
            break;
        (void)redis::wait(conns, [] { return false; });
        for (size_t i = 0; i < conns.size(); ++i) {
            auto& cursor = cursors[i];
            if (cursor.done)
                continue;
            if (auto why = unreadable(conns[i], keys, out)) {
                out.failures.push_back(std::move(*why)); // what it gave so far is kept
                cursor.done = true;
                continue;
            }
            const redisReply& reply = *conns[i].outcome()->reply;
            const redisReply& page = *reply.element[1];
            // [[id, [field, value, ...]] or [id] (too large), ...]
            for (size_t e = 0; e < page.elements; ++e) {
                const redisReply& item = *page.element[e];
                if (item.type != REDIS_REPLY_ARRAY || item.elements == 0 ||
                    item.element[0]->type != REDIS_REPLY_STRING)
                    continue;
                cursor.last = redis::text(*item.element[0]);
                std::optional<HistoryEntry> entry;
                if (item.elements == 2 && item.element[1]->type == REDIS_REPLY_ARRAY) {
                    const redisReply& list = *item.element[1];
                    std::vector<std::pair<std::string, std::string>> fields;
                    for (size_t j = 0; j + 1 < list.elements; j += 2)
                        fields.emplace_back(std::string(redis::text(*list.element[j])),
                                            std::string(redis::text(*list.element[j + 1])));
                    entry = parse_history_entry(fields);
                }
                if (!entry) {
                    ++out.skipped;
                    continue;
                }
                ++cursor.runs;
                // The same run written to several servers: one entry, the earliest start
                // (the servers' clocks differ a little).
                auto [it, inserted] = by_run.emplace(entry->run, *entry);
                if (!inserted && entry->started_ms &&
                    (!it->second.started_ms || *entry->started_ms < *it->second.started_ms))
                    it->second.started_ms = entry->started_ms;
            }
            // The next page from the entry before the last one read (entries are numbered).
            const auto last = number(cursor.last);
            const bool more =
                reply.element[0]->integer == 1 && page.elements > 0 && last && *last > 1;
            if (!more || cursor.runs >= count) {
                cursor.done = true;
                ++out.answered;
            } else {
                cursor.from = std::to_string(*last - 1);
            }
        }
    }
    for (auto& [run, entry] : by_run)
        out.runs.push_back(std::move(entry));
    std::ranges::sort(out.runs, [](const HistoryEntry& a, const HistoryEntry& b) {
        // (An unknown start is older than any.)
        return a.started_ms != b.started_ms ? a.started_ms > b.started_ms : a.run > b.run;
    });
    if (out.runs.size() > count)
        out.runs.resize(count);
    return out;
}

} // namespace redlock::lock
