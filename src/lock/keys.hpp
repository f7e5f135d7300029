#pragma once
// Every key and channel of a lock name, named in this one place (the contract's "Keys in
// Redis"). The lock key is <prefix><NAME>; every other one is {<prefix><NAME>}:<suffix>, in
// the lock key's Redis Cluster hash slot, so that one script may name several. What a name
// leaves once its runs are over is one key, its record; everything else goes with the last
// holder or waiter:
//   lock      the owner's token (a string); with --limit, the permit holders (a sorted set):
//             the lease's TTL
//   meta      the holder's metadata (a hash): the lease's TTL, deleted by the release
//   record    {<prefix><NAME>}:fence, the name's record (a hash; lock/scripts.hpp has its
//             fields): the fence counters, the --once-per record of the last slot, the
//             history and the counters. It expires when the name has not been run for the
//             history's age, history_max_age and a sixteenth more (k_keep_record); a
//             --once-per name's, two slots if that is longer. Its key is the fence counter's
//             of 0.4 (a string), which a 0.5 run takes over: a 0.4 host then fails on the
//             name instead of counting fences apart
//   queue     --fair: the waiters by ticket (a sorted set: gone with the last; 30 s after
//             the last attempt)
//   waiting   --fair: each waiter's last attempt, on the server's clock (the same)
//   limit     --limit: N (with the holders' set)
//   waiters   the wait list: the waiters by when they started (a sorted set of waiter ids:
//             gone with the last; 2 h after the last newcomer)
//   released  the pub/sub channel releases (and "shortened") are announced on: heard by
//             `redlock watch`, by waiters refused their wake channel (and of versions
//             before 0.3)
//   wake      the prefix of each waiter's own channel, <wake><waiter id>: a release wakes
//             the first waiters of the wait list or the --fair queue there, not everyone
//   events    a channel waiters do not listen to: what they need not wake for
//             ("acquired", a run recorded), heard by `redlock watch`, and by the running
//             holder for "forced" (release --force)
// A permit of a --limit name is a lock of its own: {<lock>}:permit:<i>, with its metadata at
// {<lock>}:permit:<i>:meta and its fence counter in the name's record.
// Keys of 0.4 that a 0.5 run reads once and takes over (old_*): the fence counter of a
// permit, {<lock>}:permit:<i>:fence, and the --once-per record {<lock>}:slot.

#include <string>
#include <string_view>

namespace redlock::lock {

struct Keys {
    // The keys of lock `name` under the key prefix `prefix`.
    Keys(std::string_view prefix, std::string_view name);
    // The keys of the lock whose lock key is `lock_key` (<prefix><NAME>).
    [[nodiscard]] static Keys of_lock_key(std::string_view lock_key);
    // Permit `i` (1..N) of this --limit name: its own lock, meta and fence field; the rest,
    // and `name_lock`, stay the name's.
    [[nodiscard]] Keys permit(size_t i) const;

    std::string lock;
    std::string meta;
    std::string record;
    // The record's field that holds this lock's fence counter: "f", or a permit's "f<i>".
    std::string fence_field;
    std::string queue;
    std::string waiting;
    std::string limit;
    std::string waiters;
    std::string released;
    std::string wake;
    std::string events;
    std::string name_lock; // the name's own lock key (lock, but for a permit)
    std::string old_fence; // 0.4's counter of a permit ("" for the name: it is `record`)
    std::string old_slot;  // 0.4's --once-per record

  private:
    Keys() = default;
};

// The suffix of a name's record, {<prefix><NAME>}:fence (Keys::record): what `list` finds of a
// name whose lock is free.
inline constexpr std::string_view k_record_suffix = "fence";

// {<lock key>}:<suffix>: a key in the lock key's hash slot.
[[nodiscard]] std::string companion_of(std::string_view lock_key, std::string_view suffix);

// How notices on the channels name a holder's token: 12 hex digits of its SHA1 (the
// scripts' "released ID"; release --force's "forced ID ..."), not the token, which is still
// valid on servers a release has not reached yet.
[[nodiscard]] std::string release_id(std::string_view token);

} // namespace redlock::lock
