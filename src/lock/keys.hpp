#pragma once
// Every key and channel of a lock name, named in this one place (the contract's "Keys in
// Redis"). The lock key is <prefix><NAME>; every other one is {<prefix><NAME>}:<suffix>, in
// the lock key's Redis Cluster hash slot, so that one script may name several:
//   lock      the owner's token (a string); with --limit, the permit holders (a sorted set)
//   meta      the holder's metadata (a hash, with the lock's TTL)
//   fence     the fence counter (an integer with no TTL, never deleted)
//   slot      the record of the last --once-per run (a hash)
//   queue     --fair: the waiters by ticket (a sorted set)
//   waiting   --fair: each waiter's last attempt, on the server's clock (a sorted set)
//   tickets   --fair: the ticket counter
//   limit     --limit: N
//   history   the runs of the name, newest last (a stream, capped by count and age)
//   waiters   the wait list: the waiters by when they started (a sorted set of waiter ids)
//   released  the pub/sub channel releases (and "shortened") are announced on: heard by
//             `redlock watch`, and by waiters of --limit names (and of versions before 0.3)
//   wake      the prefix of each waiter's own channel, <wake><waiter id>: a release wakes
//             the first waiters of the wait list or the --fair queue there, not everyone
//   events    a channel waiters do not listen to: what they need not wake for
//             ("acquired", a run recorded), heard by `redlock watch`, and by the running
//             holder for "forced" (release --force)
// A permit of a --limit name is a lock of its own: {<lock>}:permit:<i>, with its metadata
// and fence counter at {<lock>}:permit:<i>:meta and :fence.

#include <string>
#include <string_view>

namespace redlock::lock {

struct Keys {
    // The keys of lock `name` under the key prefix `prefix`.
    Keys(std::string_view prefix, std::string_view name);
    // The keys of the lock whose lock key is `lock_key` (<prefix><NAME>).
    [[nodiscard]] static Keys of_lock_key(std::string_view lock_key);
    // Permit `i` (1..N) of this --limit name: its own lock, meta and fence; the rest, and
    // `name_lock`, stay the name's.
    [[nodiscard]] Keys permit(size_t i) const;

    std::string lock;
    std::string meta;
    std::string fence;
    std::string slot;
    std::string queue;
    std::string waiting;
    std::string tickets;
    std::string limit;
    std::string history;
    std::string waiters;
    std::string released;
    std::string wake;
    std::string events;
    std::string name_lock; // the name's own lock key (lock, but for a permit)

  private:
    Keys() = default;
};

// {<lock key>}:<suffix>: a key in the lock key's hash slot.
[[nodiscard]] std::string companion_of(std::string_view lock_key, std::string_view suffix);

// How notices on the channels name a holder's token: 12 hex digits of its SHA1 (the
// scripts' "released ID"; release --force's "forced ID ..."), not the token, which is still
// valid on servers a release has not reached yet.
[[nodiscard]] std::string release_id(std::string_view token);

} // namespace redlock::lock
