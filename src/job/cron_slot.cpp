// Taking a cron slot (job/cron_slot.hpp): a loop of single attempts at the job's lock, each
// followed by the claim (when acquired) or a look at the slot (when held), until the slot
// is ours or decided. The waits between are short (a holder about to claim), as long as
// the servers' clocks need (early), or a wait for the release itself (an at-least-once slot
// whose run may die, a queued slot): never a spin.
#include "job/cron_slot.hpp"

#include <algorithm>
#include <optional>
#include <poll.h>
#include <unistd.h>

#include "job/acquire.hpp"
#include "lock/cron_slot.hpp"
#include "lock/inspect.hpp"
#include "util/duration.hpp"
#include "util/format.hpp"
#include "util/log.hpp"
#include "util/random.hpp"

namespace redlock::job {

namespace {

using namespace std::chrono_literals;
namespace log = util::log;

// How long a run that found a holder about to claim (or the lock free and lost the race
// for it) waits before it looks again: a round trip or two, jittered.
constexpr Millis k_look_again{20};
// How long past its window a run goes on trying to decide a slot (servers that do not
// answer, votes that split) before it gives up.
constexpr Millis k_give_up_after{30000};
// Between attempts that too few servers answered: from the first pause, doubled up to the
// last (a server restarting, a loaded machine: seconds, not minutes).
constexpr Millis k_unavailable_first{100};
constexpr Millis k_unavailable_most{2000};
// How many of a run's unanswered claims it remembers as its own (lock/cron_slot.hpp).
constexpr size_t k_unsure_kept = 8;
// At least once: how long after a slot's instant its claim lets an earlier slot whose run
// died go first (the runs that lost that slot wait for its release, and claim it again
// within milliseconds of the death), so that a later slot does not supersede its rerun.
constexpr Millis k_rerun_first{2000};

long long wall_ms() {
    return std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Sleeps `how_long` unless a forwarded signal comes first (returned).
int sleep_for(process::SignalEvents& signals, Millis how_long) {
    const auto until = Clock::now() + how_long;
    for (;;) {
        const auto left = std::chrono::ceil<Millis>(until - Clock::now());
        if (left <= 0ms)
            return 0;
        pollfd fd{signals.fd(), POLLIN, 0};
        if (::poll(&fd, 1, static_cast<int>(std::min<Millis>(left, 60s).count())) > 0)
            for (int sig : signals.read_pending())
                if (process::is_forwarded(sig))
                    return sig;
    }
}

Millis jittered(Millis base) {
    return util::random_between(base, base * 2);
}

// The fires of `slot.previous_ms` after what the record had decided (`last`, `skipped`),
// and the slot itself when `and_this`: those no run made. None when the record had
// nothing (a new job, or one whose record expired): nothing is known to be missed.
std::vector<long long> undecided(const CronSlot& slot, std::optional<long long> last,
                                 std::optional<long long> skipped, bool and_this) {
    std::vector<long long> out;
    if (!last && !skipped)
        return and_this ? std::vector<long long>{slot.instant_ms} : out;
    const long long after = std::max(last.value_or(-1), skipped.value_or(-1));
    for (long long f : slot.previous_ms)
        if (f > after && f < slot.instant_ms)
            out.push_back(f);
    if (and_this)
        out.push_back(slot.instant_ms);
    return out;
}

lock::CronOverlap overlap_action(SlotOverlap overlap) {
    switch (overlap) {
    case SlotOverlap::skip:
    case SlotOverlap::allow: // every permit held: skipped as with skip
        return lock::CronOverlap::skip;
    case SlotOverlap::queue:
        return lock::CronOverlap::queue;
    case SlotOverlap::replace:
        break;
    }
    return lock::CronOverlap::look;
}

SlotTaken slot_failed(util::Error error) {
    return SlotTaken{.how = SlotTaken::How::failed, .error = std::move(error)};
}

} // namespace

std::optional<Millis> record_slot(std::optional<Millis> once_per,
                                  std::optional<long long> keep_until_ms) {
    if (!keep_until_ms)
        return once_per;
    const Millis left(*keep_until_ms - wall_ms());
    return std::max(once_per.value_or(Millis(0)), (left + Millis(1)) / 2);
}

std::string_view slot_state(Outcome outcome) {
    switch (outcome) {
    case Outcome::lost:
    case Outcome::stopped:
        return "lost";
    case Outcome::killed:
        return "killed";
    case Outcome::interrupted:
        return "interrupted";
    case Outcome::failed:
        return "unstarted";
    default:
        return "done";
    }
}

SlotTaken take_slot(lock::Lock& lock, const std::string& name, const CronSlot& slot,
                    const std::string& host, process::SignalEvents& signals) {
    lock::CronSlotArgs args;
    args.slot_ms = slot.instant_ms;
    args.claim_until_ms = slot.instant_ms + slot.window.count();
    args.at_least_once = slot.at_least_once;
    args.keep_until_ms = slot.instant_ms + slot.keep.count();
    args.next_ms = slot.next_ms;
    args.defer_until_ms = slot.instant_ms + k_rerun_first.count();
    args.schedule = slot.schedule;
    args.zone = slot.zone;
    args.host = host;
    // Past its window, or once the job's next slot is due: that slot's run takes over (its
    // claim records this one missed if nobody decided it), so that servers out of reach
    // leave one run trying per job, not one per slot.
    long long give_up_at = args.claim_until_ms + k_give_up_after.count();
    if (slot.next_ms > slot.instant_ms)
        give_up_at = std::min(give_up_at, std::max(slot.next_ms, slot.instant_ms + 1000));
    Observer quiet;
    // The servers' clock less ours, as their last answer had it: the slot is given up by
    // theirs (a host whose clock runs ahead waits for its slot's instant on the servers).
    long long skew = 0;
    auto servers_ms = [&] { return wall_ms() + skew; };
    bool told = false; // the daemon, of the servers' clock
    auto tell_clock = [&](std::optional<long long> server_ms) {
        if (!server_ms)
            return;
        skew = *server_ms - wall_ms();
        if (told || slot.report_fd < 0)
            return;
        told = true;
        const std::string line = util::format("clock {}\n", skew);
        (void)!::write(slot.report_fd, line.data(), line.size());
    };
    WaitPolicy once;
    once.wait = 0ms;
    const WaitPolicy until_released;
    bool held = false; // by us: a wait for the release acquired it
    // Too few servers answered (the last error, the pause before the next attempt): the
    // slot is tried again until `give_up_at`, a server restarting or a host overloaded
    // being no reason to lose it.
    std::optional<util::Error> unavailable;
    Millis unavailable_pause = k_unavailable_first;
    auto try_again = [&](util::Error error) -> std::optional<SlotTaken> {
        if (error.kind != util::ErrorKind::unavailable || servers_ms() > give_up_at)
            return slot_failed(std::move(error));
        log::verbose("{}; trying again in {}", error.message,
                     util::format_duration(unavailable_pause));
        unavailable = std::move(error);
        return std::nullopt;
    };

    for (;;) {
        if (!held) {
            auto attempt = acquire(lock, name, once, signals, quiet);
            if (!attempt) {
                if (auto out = try_again(attempt.error()))
                    return std::move(*out);
                if (int sig = sleep_for(signals, jittered(unavailable_pause)))
                    return {.how = SlotTaken::How::interrupted, .signal = sig};
                unavailable_pause = std::min(unavailable_pause * 2, k_unavailable_most);
                continue;
            }
            if (attempt->outcome == Acquisition::Outcome::interrupted)
                return {.how = SlotTaken::How::interrupted, .signal = attempt->signal};
            held = attempt->outcome == Acquisition::Outcome::acquired;
        }
        Millis pause = jittered(k_look_again);
        if (held) {
            held = false;
            const auto claim = lock::claim_cron_slot(lock, args);
            tell_clock(claim.server_ms);
            using V = lock::CronClaim::Verdict;
            if (claim.verdict == V::claimed)
                return {.how = SlotTaken::How::claimed,
                        .again = claim.again,
                        .missed_ms = undecided(slot, claim.last_ms, claim.skipped_ms, false)};
            // Where a server did not answer, the claim may have landed: ours, whatever the
            // token of the next attempt.
            if (args.unsure_tokens.size() == k_unsure_kept)
                args.unsure_tokens.erase(args.unsure_tokens.begin());
            args.unsure_tokens.push_back(lock.token());
            (void)lock.release();
            if (claim.verdict == V::done)
                return {.how = SlotTaken::How::decided, .by_host = claim.by_host};
            if (claim.verdict == V::missed)
                return {.how = SlotTaken::How::missed,
                        .missed_ms = undecided(slot, claim.last_ms, claim.skipped_ms, true)};
            if (claim.verdict == V::early) {
                log::verbose("'{}': the servers' clocks are {} short of this slot", name,
                             util::format_duration(claim.early));
                pause = claim.early + 1ms;
            }
        } else {
            const auto look = lock::look_at_cron_slot(lock, args, overlap_action(slot.overlap));
            tell_clock(look.server_ms);
            using V = lock::CronLook::Verdict;
            switch (look.verdict) {
            case V::done:
                return {.how = SlotTaken::How::decided, .by_host = look.by_host};
            case V::skipped:
                return {.how = SlotTaken::How::skipped_overlap};
            case V::running:
            case V::queued: {
                // For the release itself: the run that holds it ends, or dies.
                auto waited = acquire(lock, name, until_released, signals, quiet);
                if (!waited)
                    return slot_failed(waited.error());
                if (waited->outcome == Acquisition::Outcome::interrupted)
                    return {.how = SlotTaken::How::interrupted, .signal = waited->signal};
                held = waited->outcome == Acquisition::Outcome::acquired;
                continue;
            }
            case V::overlap: {
                // replace: the running one is stopped as `release --force` stops it.
                auto view = lock::inspect(lock.connections(), lock.name_keys(), name, true);
                const auto holder = lock::current_holder({}, ::getpid(), {});
                const size_t forced = lock::force_release(
                    lock.connections(), view, {holder.host, holder.pid, holder.user, {}});
                log::verbose("'{}': released the run of an earlier slot by force on {} of {} "
                             "servers, to replace it",
                             name, forced, lock.connections().size());
                pause = 0ms;
                break;
            }
            case V::early:
                pause = look.early + 1ms;
                break;
            case V::failed:
                if (auto out = try_again({util::ErrorKind::unavailable,
                                          util::format("cannot decide this slot of '{}': too "
                                                       "few servers answered",
                                                       name)}))
                    return std::move(*out);
                pause = jittered(unavailable_pause);
                unavailable_pause = std::min(unavailable_pause * 2, k_unavailable_most);
                break;
            case V::retry:
                break;
            }
        }
        if (servers_ms() > give_up_at)
            return slot_failed(unavailable
                                   ? std::move(*unavailable)
                                   : util::Error{util::ErrorKind::unavailable,
                                                 util::format("gave up on this slot of '{}': "
                                                              "it could not be decided within "
                                                              "its window",
                                                              name)});
        if (int sig = sleep_for(signals, pause))
            return {.how = SlotTaken::How::interrupted, .signal = sig};
    }
}

} // namespace redlock::job
