#include "fleet/read.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <poll.h>

#include "fleet/read_script.hpp"
#include "lock/keys.hpp"
#include "lock/quorum.hpp"
#include "redis/fanout.hpp"
#include "redis/reply.hpp"
#include "util/count.hpp"
#include "util/format.hpp"
#include "util/timestamp.hpp"

namespace redlock::fleet {

namespace {

// The longest string a reading returns: holder fields and history entries are a few dozen
// bytes; a foreign one of megabytes is clipped (lock/read_script.hpp).
constexpr std::string_view k_clip = "1024";

std::optional<long long> number(std::string_view text) {
    long long value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size())
        return std::nullopt;
    return value;
}

// A hash as the read script packs it: fields and values joined by NULs.
std::vector<std::pair<std::string, std::string>> pairs_of(const redisReply& reply) {
    std::vector<std::pair<std::string, std::string>> out;
    std::string_view packed = redis::text(reply);
    std::vector<std::string_view> parts;
    while (reply.type == REDIS_REPLY_STRING && !packed.empty()) {
        const size_t nul = packed.find('\0');
        parts.push_back(packed.substr(0, nul));
        if (nul == std::string_view::npos)
            break;
        packed.remove_prefix(nul + 1);
        if (packed.empty())
            parts.emplace_back(); // a last value that is empty
    }
    for (size_t i = 0; i + 1 < parts.size(); i += 2)
        out.emplace_back(parts[i], parts[i + 1]);
    return out;
}

std::map<std::string, std::string> map_of(const redisReply& reply) {
    auto pairs = pairs_of(reply);
    return {std::make_move_iterator(pairs.begin()), std::make_move_iterator(pairs.end())};
}

// An outcome as redlock words them ("skipped-held"): anything else a foreign writer put in
// the counters is skipped, as it would become a label value.
bool is_word(std::string_view text) {
    return !text.empty() && text.size() <= 32 &&
           std::ranges::all_of(text, [](char c) { return (c >= 'a' && c <= 'z') || c == '-'; });
}

// A count the script returned (0 when it is none: not Redis's).
long long count_of(const redisReply& reply) {
    return reply.type == REDIS_REPLY_INTEGER ? util::plausible_count(reply.integer).value_or(0) : 0;
}

// What one server said of one name.
struct Part {
    lock::ServerView view;
    long long waiters = 0;
    long long queue = 0;
    long long listeners = 0;
    Counters counters;
    std::optional<lock::HistoryEntry> latest;
    std::optional<long long> limit; // a --limit name's N
    std::vector<std::string> permits;
};

// The script's reply (read_script.hpp) into `part`; false when it is not one.
bool parse_part(const redisReply& reply, Part& part) {
    if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 13)
        return false;
    const auto* e = reply.element;
    const std::string_view kind = redis::text(*e[0]);
    const long long pttl = e[2]->type == REDIS_REPLY_INTEGER ? e[2]->integer : -2;
    lock::read_server_view(
        e[1]->type == REDIS_REPLY_STRING ? std::optional<std::string>(redis::text(*e[1]))
                                         : std::nullopt,
        pttl, map_of(*e[3]),
        e[4]->type == REDIS_REPLY_STRING ? std::optional<std::string_view>(redis::text(*e[4]))
                                         : std::nullopt,
        map_of(*e[5]), part.view);
    part.waiters = count_of(*e[6]);
    part.queue = count_of(*e[7]);
    part.listeners = count_of(*e[8]);
    part.counters = parse_counters(pairs_of(*e[9]));
    part.latest = lock::parse_history_entry(pairs_of(*e[10]));
    if (kind != "string" && kind != "none") {
        // Not a plain lock: a --limit name's holders (a sorted set beside its N), or a key
        // of another type that keeps the name from being taken.
        part.view.ttl_ms = pttl;
        if (auto n = number(redis::text(*e[11])); kind == "zset" && n && *n > 1 && *n <= 1000) {
            part.limit = *n;
            const redisReply& tokens = *e[12];
            for (size_t i = 0; tokens.type == REDIS_REPLY_ARRAY && i < tokens.elements; ++i)
                part.permits.emplace_back(redis::text(*tokens.element[i]));
        } else {
            part.view.wrong_type = true;
        }
    }
    return true;
}

// The parts of one name, one per server (unreachable where it could not be read), merged.
LockRecord merge(const std::string& name, const std::string& key, std::vector<Part>& parts) {
    LockRecord record;
    std::vector<lock::ServerView> views;
    long long listed = 0, listeners = 0;
    std::optional<long long> limit;
    std::map<std::string, size_t> permits;
    std::optional<lock::HistoryEntry> latest;
    for (auto& part : parts) {
        if (part.view.reachable) {
            listed = std::max(listed, part.waiters);
            listeners = std::max(listeners, part.listeners);
            record.queue = std::max(record.queue, part.queue);
            record.counters.merge(part.counters);
            if (part.latest && (!latest || part.latest->started_ms > latest->started_ms))
                latest = std::move(part.latest);
            if (part.limit)
                limit = std::max(limit.value_or(0), *part.limit);
            for (const auto& token : part.permits)
                ++permits[token];
        }
        views.push_back(std::move(part.view));
    }
    record.waiters = util::add_counts(listed, listeners);
    // What the views show of the merged lock; what each server said is not kept (a
    // thousand names over five servers would keep five thousand holders).
    auto merged = lock::merge_servers(name, key, std::move(views));
    auto& view = record.view;
    view.state = merged.state;
    view.token = std::move(merged.token);
    view.ttl_ms = merged.ttl_ms;
    if (merged.holder)
        view.holder = std::make_shared<const lock::Holder>(std::move(*merged.holder));
    view.fence = merged.fence;
    view.wrong_type = merged.wrong_type;
    if (merged.last_run)
        view.slot_ms = merged.last_run->slot_ms;
    if (merged.cron)
        view.cron = std::make_shared<const lock::CronRecord>(std::move(*merged.cron));
    if (limit) {
        // A semaphore: held while a permit is, each permit a lock of its own held by the
        // token a majority of the servers has.
        const size_t majority = lock::majority_of(parts.size());
        view.limit = static_cast<size_t>(*limit);
        view.wrong_type = false;
        view.permits_held = static_cast<size_t>(
            std::ranges::count_if(permits, [&](const auto& p) { return p.second >= majority; }));
        view.state = view.permits_held > 0          ? lock::LockState::held
                     : merged.reachable >= majority ? lock::LockState::free
                                                    : lock::LockState::unknown;
        view.ttl_ms = -2;
    }
    if (latest)
        record.latest =
            LatestRun{std::move(latest->outcome), std::move(latest->host),    latest->pid,
                      std::move(latest->user),    std::move(latest->command), latest->exit_status,
                      latest->started_ms,         latest->waited_ms,          latest->held_ms};
    return record;
}

} // namespace

void Counters::merge(const Counters& other) {
    for (const auto& [outcome, n] : other.runs)
        runs[outcome] = std::max(runs[outcome], n);
    auto larger = [](std::optional<long long>& mine, const std::optional<long long>& theirs) {
        if (theirs && (!mine || *theirs > *mine))
            mine = theirs;
    };
    larger(last_success_ms, other.last_success_ms);
    larger(last_run_ms, other.last_run_ms);
    larger(slot_ms, other.slot_ms);
    for (size_t i = 0; i < durations.size(); ++i)
        durations[i] = std::max(durations[i], other.durations[i]);
    larger(duration_sum_ms, other.duration_sum_ms);
}

Counters parse_counters(const std::vector<std::pair<std::string, std::string>>& fields) {
    Counters c;
    for (const auto& [field, value] : fields) {
        const auto n = number(value);
        if (!n)
            continue;
        const auto count = util::plausible_count(*n);
        const auto time = util::plausible_ms(*n);
        std::string_view f = field;
        if (f == "last_success_ms")
            c.last_success_ms = time;
        else if (f == "last_run_ms")
            c.last_run_ms = time;
        else if (f == "slot_ms")
            c.slot_ms = time > 0 ? time : std::nullopt;
        else if (!count)
            continue;
        else if (f.starts_with("runs:") && is_word(f.substr(5)))
            c.runs[std::string(f.substr(5))] = *count;
        else if (f == "duration_ms")
            c.duration_sum_ms = count;
        else if (f == "d:+Inf")
            c.durations.back() = *count;
        else if (f.starts_with("d:"))
            if (auto bound = number(f.substr(2)))
                if (auto it = std::ranges::find(k_duration_buckets, *bound);
                    it != k_duration_buckets.end())
                    c.durations[static_cast<size_t>(it - k_duration_buckets.begin())] = *count;
    }
    return c;
}

bool LockRecord::gone() const {
    return view.state == lock::LockState::free && view.limit == 0 && waiters == 0 && queue == 0 &&
           counters.empty() && !latest && !view.slot_ms && !view.cron;
}

LockReader::LockReader(const config::Config& config)
    : m_prefix(config.key_prefix), m_conns(redis::connect_all(config.servers)),
      m_servers(config.servers.size()) {}

std::string LockReader::command(Mode mode, const std::string& name) const {
    const lock::Keys k(m_prefix, name);
    const bool by_sha = mode == Mode::evalsha_ro || mode == Mode::evalsha;
    const bool ro = mode == Mode::evalsha_ro || mode == Mode::eval_ro;
    std::array<std::string_view, 11> argv{by_sha ? (ro ? "EVALSHA_RO" : "EVALSHA")
                                                 : (ro ? "EVAL_RO" : "EVAL"),
                                          by_sha ? k_read_script.sha1 : k_read_script.source};
    std::ranges::copy(read_script_operands(k, k_clip), argv.begin() + 2);
    return redis::encode_command(argv);
}

Reading LockReader::read(std::span<const std::string> names, int interrupt_fd) {
    const size_t n = m_conns.size();
    const size_t majority = lock::majority_of(n);
    Reading out;
    out.errors.assign(n, {});
    std::vector<std::vector<Part>> parts(names.size(), std::vector<Part>(n));
    std::vector<bool> missed(n, false); // not asked again in this reading
    for (size_t i = 0; i < n; ++i)
        for (auto& p : parts)
            p[i].view.server = m_conns[i].name();
    const std::string load = [] {
        const std::array<std::string_view, 3> argv{"SCRIPT", "LOAD", k_read_script.source};
        return redis::encode_command(argv);
    }();

    for (size_t first = 0; first < names.size(); first += k_batch) {
        const size_t last = std::min(names.size(), first + k_batch);
        // Per server: the next name of a cluster node's (read one at a time), whether its
        // answer is in, and whether to send the batch again (another mode, or the script
        // loaded first).
        std::vector<size_t> next(n, first);
        std::vector<bool> done(n, false);
        std::vector<bool> with_load(n, false);
        auto send = [&](size_t i, Clock::time_point now) {
            auto& conn = m_conns[i];
            const Mode mode = m_servers[i].mode;
            const bool by_sha = mode == Mode::evalsha_ro || mode == Mode::evalsha;
            if (m_servers[i].cluster) {
                conn.start(command(mode, names[next[i]]),
                           by_sha ? command(mode == Mode::evalsha_ro ? Mode::eval_ro : Mode::eval,
                                            names[next[i]])
                                  : std::string(),
                           now);
                return;
            }
            // A connection about to be (re)made may reach a server that never saw the
            // script (first contact, a restart): it is loaded first, in the same write.
            with_load[i] = by_sha && (with_load[i] || conn.fd() < 0);
            std::string pipeline = with_load[i] ? load : std::string();
            for (size_t k = first; k < last; ++k)
                pipeline += command(mode, names[k]);
            conn.start_pipelined(std::move(pipeline), last - first - (with_load[i] ? 0 : 1), now);
        };
        // A pipelined server's answer to the batch: the parts, or the next thing to try.
        enum class Verdict { read, again, failed };
        auto take = [&](size_t i) {
            const auto& outcome = m_conns[i].outcome();
            if (!outcome || outcome->failure || !outcome->reply) {
                out.errors[i] =
                    outcome && outcome->failure ? outcome->failure->detail : "no answer";
                return Verdict::failed;
            }
            std::vector<const redisReply*> replies{outcome->reply.get()};
            for (const auto& r : outcome->trailing)
                replies.push_back(r.get());
            if (with_load[i]) {
                const redisReply& loaded = *replies.front();
                replies.erase(replies.begin());
                if (redis::is_error(loaded)) {
                    // SCRIPT LOAD refused (an ACL without it): the whole script each time.
                    if (!redis::refuses_command(redis::text(loaded), "script|load") &&
                        !redis::refuses_command(redis::text(loaded), "script")) {
                        out.errors[i] = std::string(redis::text(loaded));
                        return Verdict::failed;
                    }
                    m_servers[i].mode =
                        m_servers[i].mode == Mode::evalsha_ro ? Mode::eval_ro : Mode::eval;
                    return Verdict::again;
                }
            }
            if (replies.size() != last - first) {
                out.errors[i] = "unexpected number of replies";
                return Verdict::failed;
            }
            for (size_t k = first; k < last; ++k) {
                const redisReply& r = *replies[k - first];
                if (redis::is_error(r)) {
                    const auto error = redis::text(r);
                    if (redis::error_code(error) == redis::ErrorCode::noscript) {
                        with_load[i] = true;
                        return Verdict::again;
                    }
                    // EVALSHA_RO and EVAL_RO are Redis 7's: an older server, or an ACL
                    // that allows the others only.
                    const Mode mode = m_servers[i].mode;
                    if (mode == Mode::evalsha_ro && redis::refuses_command(error, "evalsha_ro")) {
                        m_servers[i].mode = Mode::evalsha;
                        return Verdict::again;
                    }
                    if (mode == Mode::eval_ro && redis::refuses_command(error, "eval_ro")) {
                        m_servers[i].mode = Mode::eval;
                        return Verdict::again;
                    }
                    if (mode == Mode::evalsha && redis::refuses_command(error, "evalsha")) {
                        m_servers[i].mode = Mode::eval;
                        return Verdict::again;
                    }
                    parts[k][i].view.error = std::string(error);
                    parts[k][i].view.auth_error = redis::is_auth_error(r);
                    out.errors[i] = std::string(error);
                    continue;
                }
                if (!parse_part(r, parts[k][i])) {
                    parts[k][i].view.error = "unexpected reply " + redis::describe(r);
                    parts[k][i].view.reachable = false;
                }
            }
            return Verdict::read;
        };
        auto now = Clock::now();
        for (size_t i = 0; i < n; ++i) {
            if (missed[i])
                done[i] = true;
            else
                send(i, now);
        }
        std::optional<Clock::time_point> majority_at;
        Clock::time_point grace_until{};
        const auto sent_at = now;
        int retries = 0;
        std::vector<pollfd> fds;
        for (;;) {
            // Answers in: a pipeline whole, a cluster node's name by name.
            now = Clock::now();
            for (size_t i = 0; i < n; ++i) {
                if (done[i] || m_conns[i].busy())
                    continue;
                if (m_servers[i].cluster) {
                    const auto& outcome = m_conns[i].outcome();
                    Part& part = parts[next[i]][i];
                    if (!outcome || outcome->failure || !outcome->reply) {
                        // Not asked again in this reading: a node down would cost each
                        // name its connect timeout.
                        out.errors[i] =
                            outcome && outcome->failure ? outcome->failure->detail : "no answer";
                        part.view.error = out.errors[i];
                        done[i] = missed[i] = true;
                        continue;
                    }
                    if (redis::is_error(*outcome->reply)) {
                        part.view.error = std::string(redis::text(*outcome->reply));
                        part.view.auth_error = redis::is_auth_error(*outcome->reply);
                    } else if (!parse_part(*outcome->reply, part)) {
                        part.view.error = "unexpected reply " + redis::describe(*outcome->reply);
                        part.view.reachable = false;
                    }
                    if (++next[i] < last)
                        send(i, now);
                    else
                        done[i] = true;
                    continue;
                }
                switch (take(i)) {
                case Verdict::read:
                    done[i] = true;
                    break;
                case Verdict::failed:
                    done[i] = missed[i] = true;
                    break;
                case Verdict::again:
                    if (++retries > 4 * static_cast<int>(n)) {
                        out.errors[i] = "the read script could not be run";
                        done[i] = missed[i] = true;
                    } else {
                        send(i, now);
                    }
                    break;
                }
            }
            size_t answered = 0;
            bool all_done = true;
            for (size_t i = 0; i < n; ++i) {
                answered += done[i] && !missed[i];
                all_done = all_done && done[i];
            }
            if (all_done)
                break;
            if (answered >= majority && !majority_at) {
                majority_at = now;
                // The others get as long again as the majority took (a loaded machine, a
                // far server), and at least k_stragglers: a frozen one costs that, not
                // its timeouts.
                grace_until = now + std::max<Clock::duration>(k_stragglers, now - sent_at);
            }
            if (majority_at && now >= grace_until)
                break;
            fds.clear();
            if (interrupt_fd >= 0)
                fds.push_back(pollfd{interrupt_fd, POLLIN, 0});
            const size_t at = fds.size();
            redis::add_pollfds(m_conns, fds);
            auto until = redis::earliest_deadline(m_conns);
            if (majority_at && (!until || grace_until < *until))
                until = grace_until;
            const int timeout = until ? util::poll_timeout_ms(now, *until) : 1000;
            const int rc = ::poll(fds.data(), fds.size(), timeout);
            if (rc < 0 && errno != EINTR)
                break;
            if (interrupt_fd >= 0 && rc > 0 && fds[0].revents != 0) {
                for (auto& c : m_conns)
                    c.abandon(Clock::now());
                out.interrupted = true;
                return out;
            }
            redis::dispatch(m_conns, std::span<const pollfd>(fds).subspan(at), Clock::now());
        }
        now = Clock::now();
        for (size_t i = 0; i < n; ++i)
            if (!done[i]) {
                m_conns[i].abandon(now);
                out.errors[i] = "no answer in time";
                missed[i] = true;
            }
    }
    out.locks.reserve(names.size());
    for (size_t k = 0; k < names.size(); ++k)
        out.locks.push_back(merge(names[k], lock::Keys(m_prefix, names[k]).lock, parts[k]));
    return out;
}

} // namespace redlock::fleet
