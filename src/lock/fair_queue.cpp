// Waiting in line: the wait list a release wakes the first of, and --fair's queue, a place
// in it a ticket (one more than the queue's last, the largest over a majority). Each acquire() then
// keeps the place alive and goes on only at the head of the queue (lock/scripts.hpp,
// k_fair_enrol).
#include <algorithm>
#include <array>
#include <cstdlib>
#include <limits>
#include <utility>

#include "lock/lock.hpp"
#include "lock/scripts.hpp"
#include "redis/fanout.hpp"
#include "redis/subscription.hpp"
#include "util/format.hpp"
#include "util/random.hpp"

namespace redlock::lock {

using Vote = ServerResult::Vote;

void Lock::enlist() {
    if (!m_enlisted_at)
        m_enlisted_at =
            std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch())
                .count();
}

bool Lock::listed() {
    // In the --fair queue, ZRANK: it says where as well, which queue_position() then
    // need not ask again.
    const std::string key = m_ticket ? queue_key() : m_name.waiters;
    const std::array<std::string_view, 3> argv{m_ticket ? "ZRANK" : "ZSCORE", key, m_waiter};
    auto now = Clock::now();
    const std::string command = redis::encode_command(argv);
    for (auto& c : m_conns)
        c.start(command, {}, now);
    // Listed where asked: on a majority, and missing nowhere that answered within a moment
    // of it. Missing on one server, a release there took us off (we were not subscribed
    // yet): an attempt puts us back, or that server would wake the next instead of us, and
    // --fair's head there would be another than on the rest.
    size_t found = 0;
    size_t missing = 0;
    const size_t majority = majority_of(m_conns.size());
    std::optional<Clock::time_point> until;
    auto decided = [&] {
        found = missing = 0;
        m_known_position.reset();
        for (const auto& c : m_conns)
            if (!c.busy() && c.outcome() && c.outcome()->reply) {
                const auto& reply = c.outcome()->reply;
                found += reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_INTEGER;
                missing += reply->type == REDIS_REPLY_NIL;
                if (reply->type == REDIS_REPLY_INTEGER)
                    m_known_position = std::max(m_known_position.value_or(0), reply->integer);
            }
        if (missing > 0)
            return true;
        if (found >= majority && !until)
            until = Clock::now() + redis::Subscription::k_stragglers;
        return until && Clock::now() >= *until;
    };
    (void)redis::wait(m_conns, decided, -1, &until);
    (void)decided(); // the last reply may have ended the round unjudged
    const bool listed = missing == 0 && found >= majority;
    if (!listed)
        m_known_position.reset();
    return listed;
}

bool Lock::looks_free() {
    if (m_limit > 0) { // a permit is free where fewer than N hold one
        const std::array<std::string_view, 2> argv{"ZCARD", m_name.lock};
        auto held = integers_from_majority(redis::encode_command(argv));
        return held &&
               std::ranges::count_if(
                   *held, [&](long long n) { return n < static_cast<long long>(m_limit); }) *
                       2 >
                   static_cast<long>(m_conns.size());
    }
    const std::array<std::string_view, 2> argv{"PTTL", m_keys.lock};
    auto pttls = integers_from_majority(redis::encode_command(argv));
    return pttls && std::ranges::count(*pttls, -2) * 2 > static_cast<long>(m_conns.size());
}

std::string Lock::queue_key() const {
    return m_name.queue;
}

std::string Lock::waiting_key() const {
    return m_name.waiting;
}

std::optional<std::vector<long long>> Lock::integers_from_majority(const std::string& command) {
    auto now = Clock::now();
    for (auto& c : m_conns)
        c.start(command, {}, now);
    std::vector<long long> values;
    auto count = [&] {
        values.clear();
        for (const auto& c : m_conns)
            if (!c.busy() && c.outcome() && c.outcome()->reply &&
                c.outcome()->reply->type == REDIS_REPLY_INTEGER)
                values.push_back(c.outcome()->reply->integer);
        return values.size() >= majority_of(m_conns.size());
    };
    (void)redis::wait(m_conns, count);
    if (!count())
        return std::nullopt;
    return values;
}

util::Expected<long long> Lock::take_ticket() {
    // One more than the last ticket in the queue, the largest over a majority: a waiter
    // that takes its ticket once another stands in line on a majority gets a larger one (two
    // majorities meet), and an attempt puts it in line at once. No counter is kept: the
    // queue goes with its last waiter, and leaves nothing behind.
    const std::string key = queue_key();
    const std::array<std::string_view, 5> argv{"ZRANGE", key, "-1", "-1", "WITHSCORES"};
    const std::string command = redis::encode_command(argv);
    auto now = Clock::now();
    for (auto& c : m_conns)
        c.start(command, {}, now);
    std::vector<long long> tickets;
    auto count = [&] {
        tickets.clear();
        for (const auto& c : m_conns) {
            if (c.busy() || !c.outcome() || !c.outcome()->reply ||
                c.outcome()->reply->type != REDIS_REPLY_ARRAY)
                continue;
            const redisReply& tail = *c.outcome()->reply;
            long long last = 0;
            if (tail.elements == 2 && tail.element[1]->type == REDIS_REPLY_STRING) {
                // A score as the queue holds it: a ticket (a whole number, at most 2^53).
                const double score = std::strtod(tail.element[1]->str, nullptr);
                last = score >= 0 && score < 9007199254740992.0 ? static_cast<long long>(score) : 0;
            }
            tickets.push_back(last + 1);
        }
        return tickets.size() >= majority_of(m_conns.size());
    };
    (void)redis::wait(m_conns, count);
    if (!count())
        return std::unexpected(quorum_error(collect()));
    m_ticket = std::ranges::max(tickets);
    return *m_ticket;
}

std::optional<long long> Lock::queue_position() {
    if (!m_ticket)
        return std::nullopt;
    if (auto known = std::exchange(m_known_position, std::nullopt))
        return known; // listed() just read it
    const std::string key = queue_key();
    const std::array<std::string_view, 3> argv{"ZRANK", key, m_waiter};
    // Where we are not enrolled yet (nil, not an integer) we do not count; of the others,
    // the furthest back, so as not to promise more than a majority agrees on.
    auto ranks = integers_from_majority(redis::encode_command(argv));
    if (!ranks)
        return std::nullopt;
    return std::ranges::max(*ranks);
}

void Lock::take_place_of(std::string waiter, std::optional<long long> ticket, bool listed) {
    m_waiter = std::move(waiter);
    m_ticket = ticket;
    m_listed = listed && !ticket;
}

void Lock::leave_queue() {
    if (!m_ticket) {
        if (!m_listed)
            return;
        // The wait list: best effort, as a release that finds nobody on our channel takes
        // us off it anyway (it then looks at the next waiter instead).
        const std::array<std::string_view, 3> argv{"ZREM", m_name.waiters, m_waiter};
        (void)integers_from_majority(redis::encode_command(argv));
        m_listed = false;
        return;
    }
    const std::array<std::string, 2> keys{queue_key(), waiting_key()};
    const std::array<std::string, 2> args{m_waiter, m_name.wake};
    // Best effort: a place not given up here lapses by itself within k_drop_waiter.
    (void)integers_from_majority(script_call(k_fair_leave_script, false, keys, args));
    m_ticket.reset();
}

} // namespace redlock::lock
