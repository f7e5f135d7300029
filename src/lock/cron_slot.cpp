// A cron slot's claim, look and end over the fan-out (lock/cron_slot.hpp): each script's
// array replies read per server, and counted by the majority rule.
#include "lock/cron_slot.hpp"

#include <algorithm>
#include <array>

#include "lock/cron_scripts.hpp"
#include "redis/fanout.hpp"
#include "util/format.hpp"
#include "util/sha256.hpp"

namespace redlock::lock {

namespace {

// One server's reply to a cron script: {code, ...}, or the integer alone.
struct Answer {
    bool answered = false; // a reply that is neither a failure nor an error
    long long code = 0;
    long long a = -1;
    long long b = -1;
    std::string host;
    std::optional<long long> now; // the server's TIME
};

long long element_integer(const redisReply& reply, size_t i) {
    if (i >= reply.elements || reply.element[i]->type != REDIS_REPLY_INTEGER)
        return -1;
    return reply.element[i]->integer;
}

Answer answer_of(const redis::Connection& conn) {
    Answer out;
    const auto& outcome = conn.outcome();
    if (conn.busy() || !outcome || outcome->failure || !outcome->reply)
        return out;
    const redisReply& reply = *outcome->reply;
    if (reply.type == REDIS_REPLY_INTEGER) {
        out.answered = true;
        out.code = reply.integer;
    } else if (reply.type == REDIS_REPLY_ARRAY && reply.elements > 0 &&
               reply.element[0]->type == REDIS_REPLY_INTEGER) {
        out.answered = true;
        out.code = reply.element[0]->integer;
        out.a = element_integer(reply, 1);
        out.b = element_integer(reply, 2);
        if (reply.elements > 4 && reply.element[4]->type == REDIS_REPLY_STRING)
            out.host = std::string(redis::text(*reply.element[4]));
        if (const long long now = element_integer(reply, 5); now > 0)
            out.now = now;
    }
    return out;
}

void send(std::span<redis::Connection> conns, const Script& script,
          std::span<const std::string> keys, std::span<const std::string> args,
          const std::string& after = {}, size_t after_count = 0) {
    const auto now = Clock::now();
    const std::string by_sha = script_call(script, true, keys, args);
    const std::string eval = script_call(script, false, keys, args);
    for (auto& c : conns) {
        // As Lock::send_all: a connection about to be made may meet a server that never
        // saw the script (EVAL at once), and something pipelined after goes with EVAL.
        if (!after.empty())
            c.start_pipelined(eval + after, after_count, now);
        else if (c.fd() < 0)
            c.start(eval, {}, now);
        else
            c.start(by_sha, eval, now);
    }
}

// The answers once `decided` says so (or every server answered or failed).
std::vector<Answer> answers(std::span<redis::Connection> conns,
                            const std::function<bool(const std::vector<Answer>&)>& decided) {
    auto read = [&] {
        std::vector<Answer> out;
        out.reserve(conns.size());
        for (const auto& c : conns)
            out.push_back(answer_of(c));
        return out;
    };
    (void)redis::wait(conns, [&] { return decided(read()); });
    return read();
}

size_t count(const std::vector<Answer>& all, auto&& which) {
    return static_cast<size_t>(std::ranges::count_if(all, which));
}

// How long until a majority of the servers' clocks reach the instant, from their "early
// by" answers (a server that answered otherwise is there already).
Millis early_by(const std::vector<Answer>& all, size_t majority) {
    std::vector<long long> ahead;
    for (const auto& a : all)
        if (a.answered)
            ahead.push_back(a.code == 3 ? std::max(a.a, 0LL) : 0);
    if (ahead.size() < majority)
        return Millis(std::ranges::max(ahead.empty() ? std::vector<long long>{0} : ahead));
    std::ranges::sort(ahead);
    return Millis(ahead[majority - 1]);
}

// The median of the servers' clocks, from those that said.
std::optional<long long> server_ms(const std::vector<Answer>& all) {
    std::vector<long long> times;
    for (const auto& a : all)
        if (a.now)
            times.push_back(*a.now);
    if (times.empty())
        return std::nullopt;
    std::ranges::sort(times);
    return times[times.size() / 2];
}

std::string by_host(const std::vector<Answer>& all) {
    for (const auto& a : all)
        if (a.code == -1 && !a.host.empty())
            return a.host;
    return {};
}

std::string entries(const Lock& lock, std::span<const HistoryRecord> records) {
    std::string out;
    for (const auto& record : records)
        out += history_command(lock.name_keys(), lock.token(), record);
    return out;
}

void wait_for_majority(Lock& lock) {
    const size_t majority = majority_of(lock.connections().size());
    (void)redis::wait(lock.connections(), [&] {
        return static_cast<size_t>(std::ranges::count_if(lock.connections(), [](const auto& c) {
                   return !c.busy() && c.outcome() && !c.outcome()->failure;
               })) >= majority;
    });
}

std::vector<std::string> common_args(const Lock& lock, const CronSlotArgs& args) {
    return {lock.token(), std::to_string(args.slot_ms)};
}

} // namespace

CronClaim claim_cron_slot(Lock& lock, const CronSlotArgs& args) {
    const auto& name = lock.name_keys();
    const std::string meta = lock.limit() > 1 ? name.permit(lock.permit()).meta : name.meta;
    const std::array<std::string, 4> k{lock.key(), meta, name.record, name.lock};
    std::vector<std::string> argv = common_args(lock, args);
    argv.insert(argv.end(),
                {std::to_string(args.claim_until_ms), args.at_least_once ? "1" : "0",
                 std::to_string(args.keep_until_ms), std::to_string(args.next_ms), args.schedule,
                 args.zone, std::to_string(args.defer_until_ms), args.host, ""});
    for (const auto& token : args.unsure_tokens)
        argv.back() += (argv.back().empty() ? "" : ",") + token;
    send(lock.connections(), k_cron_claim_script, k, argv);
    const size_t total = lock.connections().size();
    const size_t majority = majority_of(total);
    auto yes = [](const Answer& a) { return a.code == 1 || a.code == 2; };
    auto all = answers(lock.connections(), [&](const std::vector<Answer>& so_far) {
        const size_t yeses = count(so_far, yes);
        const size_t others = count(so_far, [&](const Answer& a) { return a.answered && !yes(a); });
        return yeses >= majority || others > total - majority;
    });
    CronClaim out;
    out.server_ms = server_ms(all);
    auto largest = [&](auto field, auto&& which) -> std::optional<long long> {
        std::optional<long long> best;
        for (const auto& a : all)
            if (which(a) && a.*field >= 0)
                best = std::max(best.value_or(a.*field), a.*field);
        return best;
    };
    if (count(all, yes) >= majority) {
        out.verdict = CronClaim::Verdict::claimed;
        out.again = count(all, [](const Answer& a) { return a.code == 2; }) > 0;
        out.last_ms = largest(&Answer::a, yes);
        out.skipped_ms = largest(&Answer::b, yes);
        return out;
    }
    auto missed = [](const Answer& a) { return a.code == -4; };
    if (count(all, [](const Answer& a) { return a.code == -1; }) >= majority) {
        out.verdict = CronClaim::Verdict::done;
        out.by_host = by_host(all);
    } else if (count(all, missed) >= majority) {
        out.verdict = CronClaim::Verdict::missed;
        out.last_ms = largest(&Answer::a, missed);
        out.skipped_ms = largest(&Answer::b, missed);
    } else if (count(all, [](const Answer& a) { return a.code == 3; }) > 0) {
        out.verdict = CronClaim::Verdict::early;
        out.early = early_by(all, majority);
    } else if (count(all, [](const Answer& a) { return a.code == 5; }) > 0) {
        out.verdict = CronClaim::Verdict::deferred;
    }
    return out;
}

CronLook look_at_cron_slot(Lock& lock, const CronSlotArgs& args, CronOverlap overlap) {
    const auto& name = lock.name_keys();
    std::vector<std::string> keys{name.lock, name.meta, name.record};
    for (size_t i = 1; lock.limit() > 1 && i <= lock.limit(); ++i)
        keys.push_back(name.permit(i).meta);
    std::vector<std::string> argv = common_args(lock, args);
    const char* what = overlap == CronOverlap::skip    ? "skip"
                       : overlap == CronOverlap::queue ? "queue"
                                                       : "look";
    argv.insert(argv.end(),
                {args.at_least_once ? "1" : "0", what, std::to_string(args.keep_until_ms)});
    send(lock.connections(), k_cron_yield_script, keys, argv);
    const size_t total = lock.connections().size();
    const size_t majority = majority_of(total);
    // Every server's answer, but not a frozen one's timeout once a majority answered.
    auto all = answers(lock.connections(), [&](const std::vector<Answer>& so_far) {
        return count(so_far, [](const Answer& a) { return a.answered; }) >= majority;
    });
    auto with = [&](long long code) {
        return count(all, [code](const Answer& a) { return a.code == code; });
    };
    CronLook out;
    const size_t answered = count(all, [](const Answer& a) { return a.answered; });
    if (answered < majority)
        out.verdict = CronLook::Verdict::failed;
    else if (with(-1) >= majority)
        out.verdict = CronLook::Verdict::done;
    else if (with(14) >= majority)
        out.verdict = CronLook::Verdict::skipped;
    else if (with(15) >= majority)
        out.verdict = CronLook::Verdict::queued;
    else if (with(11) > 0)
        out.verdict = CronLook::Verdict::running;
    else if (with(3) > 0) {
        out.verdict = CronLook::Verdict::early;
        out.early = early_by(all, majority);
    } else if (with(13) >= majority)
        out.verdict = CronLook::Verdict::overlap;
    else
        out.verdict = CronLook::Verdict::retry;
    out.by_host = by_host(all);
    out.server_ms = server_ms(all);
    return out;
}

void finish_cron_slot(Lock& lock, long long slot_ms, std::string_view state,
                      std::string_view status, std::span<const HistoryRecord> more) {
    const std::array<std::string, 1> keys{lock.name_keys().record};
    const std::array<std::string, 4> argv{lock.token(), std::to_string(slot_ms), std::string(state),
                                          std::string(status)};
    send(lock.connections(), k_cron_finish_script, keys, argv, entries(lock, more), more.size());
    wait_for_majority(lock);
}

void record_slot_entries(Lock& lock, std::span<const HistoryRecord> records) {
    if (records.empty())
        return;
    const std::string all = entries(lock, records);
    const auto now = Clock::now();
    for (auto& c : lock.connections())
        c.start_pipelined(all, records.size() - 1, now);
    wait_for_majority(lock);
}

std::string slot_entry_id(std::string_view name, long long slot_ms, std::string_view outcome) {
    return util::sha256_hex(util::format("{}\n{}\n{}", name, slot_ms, outcome)).substr(0, 16);
}

} // namespace redlock::lock
