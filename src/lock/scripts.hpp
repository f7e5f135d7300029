#pragma once
// The Lua scripts redlock runs (lock/script.hpp: each with its SHA1 for EVALSHA and the
// commands it calls, both derived when compiling). Keys go only as KEYS and values only as
// ARGV. KEYS[1] is the lock key, KEYS[2] its metadata hash {<key>}:meta, KEYS[3] the name's
// record {<key>}:fence (lock/keys.hpp; same hash slot). tests/lock/scripts_test.cpp checks
// each SHA1 against the server's SCRIPT LOAD, and each list of commands against the
// script's source.
//
// The record is a hash, so that all a name leaves is one key (about 300 bytes for a run of
// a new name): a hash stays in Redis's compact encoding (a listpack: a few bytes a field)
// while it has at most 128 fields and every value is at most 64 bytes, and every key costs
// some 150 bytes more. Its fields:
//   f, f<i>        the fence counter of the name, and of permit i of a --limit name: from
//                  the servers' clock (TIME in µs) when it is not there (k_fence_take)
//   e, e:2 .. e:4  the newest history entry: its values (k_entry_fields) joined by NULs, in
//                  pieces of at most 63 bytes (k_blob)
//   <n>, <n>:2 ..  the older entries, by number (the newest is the last number + 1)
//   h              "<first> <last> <keep>": the oldest and the newest of the older entries'
//                  numbers, and how many entries the last write kept (what readers show)
//   ids            the ids of the runs recorded before the newest, up to seven (a run is
//                  recorded once: k_history_script)
//   r:<outcome>, d<bound>, d+, ds, lr, ls, sl
//                  the counters of the runs recorded before the newest (k_run_counters: a
//                  reading adds the newest, so that a name run once has none)
//   s, s:2 .. s:4  the record of the last --once-per run (k_slot_fields)
// It expires the history's age after the name's last run (k_keep_record).

#include "lock/script.hpp"

namespace redlock::lock {

// The fragments that several scripts share, written once.

// `keep_record(key, age, slot)`: the record `key` expires the history's age (ms) and a
// sixteenth from now, or two --once-per slots of `slot` ms if that is longer (a slot's record
// says until the slot is over that it was run, and for a slot more who ran it). Every write
// that gives out a fence calls it (so that a record lives the age after any fence it gave:
// docs/safety.md, "Fencing tokens"), and the history's when the run did not (so that an
// entry is kept the age). The one rule of how long what a name leaves lives: lock/keys.hpp.
inline constexpr auto k_keep_record = fragment(R"lua(local function keep_record(key, age, slot)
  age = tonumber(age)
  redis.call("pexpire", key, math.max(age + math.floor(age / 16), 2 * (tonumber(slot) or 0)))
end
)lua",
                                               {.calls = {"pexpire"}});

// `number_text(s)`: whether `s` is a fence counter as HINCRBY writes it (no sign, no leading
// zero, below 10^18).
inline constexpr auto k_number_text = fragment(R"lua(local function number_text(s)
  return s == "0" or (#s <= 18 and string.match(s, "^[1-9]%d*$") ~= nil)
end
)lua");

// `take_fence(old)`, right after a successful SET of KEYS[1]: the next fence, HINCRBY of the
// counter (field ARGV[5] of the record KEYS[3]; with ARGV[3] the history's age and ARGV[4] a
// --once-per slot, for keep_record). A counter that is not there (a new name, or one whose
// record expired) starts from the server's clock in µs (about 1.8e15, exact in Lua's doubles
// until 2255), and from past `old`, a permit's 0.4 counter, which it takes over: larger than
// every fence given before as long as no server's clock stepped back by more than the time
// the name was unused (docs/safety.md). A 0.4 counter at KEYS[3] (a string) becomes the
// record's "f" first. A counter HINCRBY refuses (not an integer: "007", "banana"; or at 2^63
// - 1) or one that gives no fence from 1 to 2^53 - 1 (a negative counter; one that large is no
// counter of ours, and would not be exact in Lua) is an error, never read as 0: the increment
// is undone, and the SET, so that the script has written nothing. Any other failure (an ACL
// that refuses HINCRBY) is returned as it came, after the same undoing. Returns the fence, or
// nil and the error reply. Taking the fence this way, not reading the counter before the SET,
// costs a won attempt one command less (bench/crowd.sh counts them). (A Lua pcall around
// redis.call, not redis.pcall: HINCRBY is a command the script needs, as doctor checks, not
// one it may do without.)
inline constexpr auto k_fence_take =
    join(k_number_text, k_keep_record,
         fragment(R"lua(local function take_fence(old)
  local function fail(why)
    redis.call("del", KEYS[1])
    return nil, redis.error_reply(why or ("ERR fence counter " .. KEYS[3] .. " is not a number"))
  end
  local function increment()
    local took, fence = pcall(function() return redis.call("hincrby", KEYS[3], ARGV[5], 1) end)
    return took, fence, not took and (type(fence) == "table" and fence.err or tostring(fence)) or ""
  end
  local took, fence, why = increment()
  if string.find(why, "WRONGTYPE", 1, true) and redis.call("type", KEYS[3]).ok == "string" then
    local counter = redis.call("get", KEYS[3])
    if not number_text(counter) then return fail() end
    redis.call("del", KEYS[3])
    redis.call("hset", KEYS[3], "f", counter)
    took, fence, why = increment()
  end
  if not took then
    if string.find(why, "integer", 1, true) or string.find(why, "overflow", 1, true) then return fail() end
    return fail(why)
  end
  local fresh, counter = fence == 1, false
  if fresh then
    local t = redis.call("time")
    fence = t[1] * 1000000 + t[2]
    counter = old and redis.call("get", old)
    if counter and not number_text(counter) then fence = -1 elseif counter then fence = math.max(fence, tonumber(counter) + 1) end
  end
  if fence < 1 or fence >= 9007199254740992 then
    if fresh then redis.call("hdel", KEYS[3], ARGV[5]) else redis.pcall("hincrby", KEYS[3], ARGV[5], -1) end
    return fail()
  end
  if fresh then redis.call("hset", KEYS[3], ARGV[5], fence) end
  if counter then redis.call("del", old) end
  keep_record(KEYS[3], ARGV[3], ARGV[4])
  return fence
end
)lua",
                  {.calls = {"hincrby", "type", "get", "del", "hset", "time", "hdel"},
                   .pcalls = {"hincrby"}}));

// `now`: the server's TIME in ms since the Unix epoch.
inline constexpr auto k_server_now = fragment(R"lua(local t = redis.call("time")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
)lua",
                                              {.calls = {"time"}});

// Goes on only while the lock (KEYS[1]) holds our token (ARGV[1]); else returns 0.
inline constexpr auto k_token_check =
    fragment(R"lua(if redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end
)lua",
             {.calls = {"get"}});

// Round 1 of an acquisition over several servers: SET NX PX; on success the fence counter
// is incremented (k_fence_take: when it is not a number, the SET is undone and the script
// fails, having written nothing) and the metadata hash (the fence and the holder's
// field/value pairs) is replaced with the same TTL. ARGV[1] the token, ARGV[2] the lease
// (ms), ARGV[3] the history's age and ARGV[4] the --once-per slot (ms, "0" without) that
// keep the record (k_keep_record), ARGV[5] the record's fence field. Returns the new counter,
// the fence this server gives (the client takes the largest over a majority, and writes it
// back in a second round only where the replies differ: lock/lock.hpp); when held by
// another owner, -2 - PTTL (-1: held with no expiry), which a waiter sleeps by
// (k_held_reply). It says "acquired" on the events channel ({<key>}:events), which `redlock
// watch` listens to and no waiter does.
//
// A waiter (KEYS[4] and more) names itself: ARGV[6] its place (below), ARGV[7] the ms
// after which a silent --fair waiter is dropped (without --fair: "1" when it may be on the
// wait list already, "0" on its first attempt), ARGV[8] its id (kept while each attempt has
// a fresh token), ARGV[9] the prefix of the waiters' wake channels ({<key>}:w:,
// lock/keys.hpp), to which its id is appended. The holder's fields then start at ARGV[10]
// (else at ARGV[6]).
//
// With four KEYS (4: the wait list, a sorted set of the waiters by ARGV[6], the ms they
// started waiting), an attempt that finds the lock held enlists the waiter there; one that
// sets it takes the waiter off. A release wakes the first waiters of the list on their
// own channels, not everyone (k_wake).
//
// --fair, with five KEYS (4: the queue, a sorted set of waiters by ticket, ARGV[6]; 5: each
// waiter's last attempt, in the server's TIME ms): the attempt first enrolls us (again, with
// the same ticket, where we were dropped or never got: one order on every server), drops
// silent waiters at the head, and goes on only when we are the head. Else it is not our
// turn, whether the lock is free or not: "held", with as PTTL the time until the head could
// be dropped, and one such time more for each waiter between it and us, at most six (so that
// someone keeps the queue's keys alive), so that a crowd in the queue sleeps (a release wakes
// the head, k_wake) instead of trying again and again. A head silent for ARGV[7] ms that
// still listens on its wake channel is a waiter asleep until its turn, not a dead one: it is
// woken, and marked (its last attempt set to now + 0.5 ms: attempts write whole ms) so that
// it is dropped if silent for ARGV[7] ms more (frozen). The two keys expire 10 x ARGV[7]
// after the last attempt: renewed by an attempt that finds less than 9 x ARGV[7] left on the
// queue, or none (-1: the queue is new), so that most attempts, a newcomer's too, pay one
// PTTL, not two PEXPIREs; they go with their last waiter. A head whose last attempt is later
// than the server's TIME (its clock stepped back, or a forged entry) is taken as seen now: a
// live waiter keeps its place, and a dead one lapses as any other, instead of holding the
// queue up until that time comes. (A ticket is one more than the queue's last, read by
// Lock::take_ticket: no counter is kept.)

// Where the holder's fields start: after a waiter's four arguments, if any.
inline constexpr auto k_waiter_args = fragment(R"lua(local first = 6
if #KEYS > 3 then first = 10 end
)lua");

// The --fair parts of both acquire scripts (see above): enrolment and the head-of-queue
// check before the SET, recording an attempt of the head that finds the lock held, and
// leaving the queue after a successful SET. The head's attempt looks at the queue's head
// alone before the lock: one that takes the lock leaves the queue, so its attempt needs
// no recording (nor the server's TIME, nor a look at the queue's TTL); one that finds it
// held records it then (k_fair_head_held). So a hand-over costs the queue one ZRANGE
// before the SET, not five commands. Another waiter's attempt knows the head from that
// same look (with its ticket: a newcomer with a smaller one is the head now), and reads it
// again only after dropping a silent one.
inline constexpr auto k_fair_enrol = fair_only(
    join(fragment(R"lua(local fair_head = false
local function attempted(now)
  redis.call("zadd", KEYS[5], now, ARGV[8])
  if redis.call("pttl", KEYS[4]) < tonumber(ARGV[7]) * 9 then
    for i = 4, 5 do redis.call("pexpire", KEYS[i], tonumber(ARGV[7]) * 10) end
  end
end
local top = {}
if #KEYS == 5 then
  top = redis.call("zrange", KEYS[4], 0, 0, "WITHSCORES")
  fair_head = top[1] == ARGV[8]
end
if #KEYS == 5 and not fair_head then
)lua"),
         indented<k_server_now, 2>,
         fragment(R"lua(  local patience = tonumber(ARGV[7])
  local fresh = redis.call("zadd", KEYS[4], "NX", ARGV[6], ARGV[8]) == 1
  attempted(now)
  local head = top[1]
  if fresh and (head == nil or tonumber(top[2]) > tonumber(ARGV[6]) or (tonumber(top[2]) == tonumber(ARGV[6]) and ARGV[8] < head)) then head = ARGV[8] end
  while head and head ~= ARGV[8] do
    local seen = tonumber(redis.call("zscore", KEYS[5], head))
    if seen and seen > now + 1 then
      seen = now
      redis.call("zadd", KEYS[5], "XX", now, head)
    end
    local alive = seen and seen > now - patience
    if seen and not alive and seen % 1 == 0 then
      local n = redis.pcall("pubsub", "numsub", ARGV[9] .. head)
      if type(n) == "table" and not n.err and tonumber(n[2] or 0) > 0 then
        seen = now + 0.5
        redis.call("zadd", KEYS[5], "XX", seen, head)
        redis.pcall("publish", ARGV[9] .. head, "released " .. redis.sha1hex(ARGV[1]):sub(1, 12))
        alive = true
      end
    end
    if alive then
      local behind = (redis.call("zrank", KEYS[4], ARGV[8]) or 1) - 1
      return -2 - math.min(math.floor(seen + patience * (1 + behind) - now), patience * 6)
    end
    redis.call("zrem", KEYS[4], head)
    redis.call("zrem", KEYS[5], head)
    head = redis.call("zrange", KEYS[4], 0, 0)[1]
  end
end
)lua",
                  {.calls = {"zadd", "pttl", "pexpire", "zrange", "zscore", "zrank", "zrem"},
                   .pcalls = {"pubsub", "publish"}})));
// The head found the lock held (`pttl`, k_lock_pttl): its attempt is recorded now.
inline constexpr auto k_fair_head_held =
    fair_only(join(fragment(R"lua(if fair_head and pttl ~= -2 then
)lua"),
                   indented<k_server_now, 2>, fragment(R"lua(  attempted(now)
end
)lua")));
// After a successful SET: off the wait list, or out of the --fair queue.
inline constexpr auto k_fair_leave = fair_only(fragment(R"lua(  if #KEYS == 5 then
    redis.call("zrem", KEYS[4], ARGV[8])
    redis.call("zrem", KEYS[5], ARGV[8])
  end
)lua",
                                                        {.calls = {"zrem"}}));
inline constexpr auto k_waiter_leave = join(
    fragment(R"lua(  if #KEYS == 4 and ARGV[7] == "1" then redis.pcall("zrem", KEYS[4], ARGV[8]) end
)lua",
             {.pcalls = {"zrem"}}),
    k_fair_leave);

// What k_acquire_permit_script adds to a "held" reply's PTTL when every permit is held
// (2^48 ms: some 8900 years, more than any lease).
inline constexpr long long k_every_permit_held = 1LL << 48;

// An acquire script's "held" reply, -2 - PTTL: the lock's remaining ms (-1: no expiry).
[[nodiscard]] constexpr long long held_pttl(long long reply) {
    const long long pttl = -2 - reply;
    return pttl >= k_every_permit_held ? pttl - k_every_permit_held : pttl;
}
// Whether a "held" reply says every permit of a --limit name is held.
[[nodiscard]] constexpr bool every_permit_held(long long reply) {
    return -2 - reply >= k_every_permit_held;
}

// The holder's metadata (KEYS[2]): the fence and the holder's fields from ARGV[first], with
// the lease's TTL. A hash left from another holder (it expires with its lock, in the same
// ms, so only one deleted by hand with the lock left behind) shows in HSET's count of new
// fields: it is replaced. So the common case costs no DEL.
inline constexpr auto k_write_meta = fragment(R"lua(if #ARGV >= first then
  if redis.call("hset", KEYS[2], "fence", fence, unpack(ARGV, first)) <= (#ARGV - first + 1) / 2 then
    redis.call("del", KEYS[2])
    redis.call("hset", KEYS[2], "fence", fence, unpack(ARGV, first))
  end
  redis.call("pexpire", KEYS[2], ARGV[2])
else
  redis.call("del", KEYS[2])
end
)lua",
                                              {.calls = {"hset", "del", "pexpire"}});
// The parts both acquire scripts share, around the --fair ones: the SET, and on success
// the fence and the metadata; and the reply. They differ only in the "acquired" notice.
inline constexpr auto k_acquire_set =
    fragment(R"lua(if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  local fence, failed = take_fence(false)
  if failed then return failed end
)lua",
             {.calls = {"set"}});
inline constexpr auto k_acquire_won = indented<k_write_meta, 2>;
// Held (PTTL first: a failed attempt reads nothing more): a waiter enlists (again: the
// list may have expired, or dropped it as gone), and the reply says for how long. The wait
// list is a help, not a need (pcall): without it, a waiter wakes at the holder's expiry.
// It expires two hours after its last newcomer. The --fair head sleeps at most three times
// its patience, so that it keeps the queue alive (its keys expire) and its place fresh.
inline constexpr auto k_lock_pttl = fragment(R"lua(local pttl = redis.call("pttl", KEYS[1])
)lua",
                                             {.calls = {"pttl"}});
inline constexpr auto k_acquire_held = fragment(R"lua(if pttl ~= -2 then
  if #KEYS == 4 and redis.pcall("zadd", KEYS[4], ARGV[6], ARGV[8]) == 1 then redis.pcall("pexpire", KEYS[4], 7200000) end
  if #KEYS == 5 and (pttl == -1 or pttl > tonumber(ARGV[7]) * 3) then pttl = tonumber(ARGV[7]) * 3 end
  return -2 - pttl
end
)lua",
                                                {.pcalls = {"zadd", "pexpire"}});
inline constexpr auto k_acquire_tail = fragment(R"lua(  return fence
end
return -2 - redis.call("pttl", KEYS[1]))lua",
                                                {.calls = {"pttl"}});

inline constexpr auto k_acquire_text =
    compose(k_fence_take, k_waiter_args, k_fair_enrol, k_lock_pttl, k_fair_head_held,
            k_acquire_held, k_acquire_set, k_waiter_leave, k_acquire_won,
            fragment(R"lua(  redis.pcall("publish", "{" .. KEYS[1] .. "}:events", "acquired")
)lua",
                     {.pcalls = {"publish"}}),
            k_acquire_tail);
inline constexpr Script k_acquire_script = script(k_acquire_text);

// Round 2 over several servers, sent only when the round-1 replies differ (ARGV[1] token,
// ARGV[2] fence, ARGV[3] the record's fence field, ARGV[4] and ARGV[5] the history's age and
// a --once-per slot, k_keep_record): while this server still holds our token, raise its
// counter to the fence, never lowering it, and record the fence in the metadata if there is
// any. A counter that is not a number is an error, never read as 0, and the script stops
// there, having written nothing. Returns 1 when the counter now holds our fence, 0 when the
// token is gone or the counter is already higher.
inline constexpr auto k_fence_text =
    compose(k_number_text, k_keep_record, k_token_check,
            fragment(R"lua(local fence = redis.call("hget", KEYS[3], ARGV[3])
if fence and not number_text(fence) then return redis.error_reply("ERR fence counter " .. KEYS[3] .. " is not a number") end
if fence and tonumber(fence) > tonumber(ARGV[2]) then return 0 end
redis.call("hset", KEYS[3], ARGV[3], ARGV[2])
keep_record(KEYS[3], ARGV[4], ARGV[5])
if redis.call("exists", KEYS[2]) == 1 then redis.call("hset", KEYS[2], "fence", ARGV[2]) end
return 1)lua",
                     {.calls = {"hget", "hset", "exists"}}));
inline constexpr Script k_fence_script = script(k_fence_text);

// `wake(lists, prefix, payload, marks)`: wakes the first waiters of each of `lists` (the
// wait list, the --fair queue: sorted sets of waiter ids), publishing `payload` on their
// own wake channels (prefix .. id). Two of each list, not one: the second hears
// `payload .. " next"`, and only looks (a PTTL) a moment later, trying only if the first has
// not taken the lock: a first that is frozen costs that moment, not the lease. On the list
// `marks` (the wait list) the first woken is marked (its score + 0.5; its next attempt
// writes the whole one back): one still marked at the next release has not tried since
// (stopped with Ctrl-Z, a paused container). It is told again, but is not counted, and is
// moved behind every waiter (k_behind: its next attempt puts it back in its place), so
// that stuck waiters, however many, use up neither the two woken nor the window looked at:
// a live waiter behind them is reached by the releases that find them. (The --fair queue
// has its own rule for a silent head, k_fair_enrol.) A waiter nobody listens for any more
// (dead, or it gave up) is taken off the list, and the next one woken instead: up to 32
// looked at, besides at most 256 stuck ones moved. pcall throughout: an ACL that allows
// none of it must not cost the release itself (the waiters then wake at the holder's
// expiry).
inline constexpr auto k_behind = fragment(R"lua(local function behind(list, score, tail)
  if not tail then
    local last = redis.pcall("zrange", list, -1, -1, "WITHSCORES")
    tail = math.floor(tonumber(type(last) == "table" and last[2] or score) or score) + 0.5
  end
  return tail + 1
end
)lua",
                                          {.pcalls = {"zrange"}});
inline constexpr auto k_wake =
    join(k_behind, fragment(R"lua(local function wake(lists, prefix, payload, marks)
  for _, list in ipairs(lists) do
    local woken, looked, moved, tail, first_moved = 0, 0, 0, nil, nil
    while woken < 2 and looked < 32 and moved < 256 do
      local ids = redis.pcall("zrange", list, woken, woken + 31, "WITHSCORES")
      if ids.err or #ids == 0 then break end
      for i = 1, #ids, 2 do
        local id, score = ids[i], tonumber(ids[i + 1])
        if first_moved and score >= first_moved then looked = 32 break end
        local n = redis.pcall("publish", prefix .. id, woken == 0 and payload or payload .. " next")
        if type(n) ~= "number" then looked = 32 break end
        if n == 0 then
          redis.pcall("zrem", list, id)
          looked = looked + 1
        elseif list ~= marks or score % 1 == 0 then
          if list == marks and woken == 0 then redis.pcall("zadd", list, "XX", score + 0.5, id) end
          woken = woken + 1
          looked = looked + 1
        else
          tail = behind(list, score, tail)
          first_moved = first_moved or tail
          redis.pcall("zadd", list, "XX", tail, id)
          moved = moved + 1
        end
        if woken == 2 or looked == 32 or moved == 256 then break end
      end
      if #ids < 64 then break end
    end
  end
end
)lua",
                            {.pcalls = {"zrange", "publish", "zrem", "zadd"}}));

// Compare-and-pexpire (ARGV[1] token, ARGV[2] ttl ms), the metadata alongside (its ttl_ms
// follows, for `extend`). Never re-creates an expired lock. Returns 1 when renewed, 0 when
// the token is not ours. With ARGV[3], the release channel, and ARGV[4], the wake channels'
// prefix (the last two KEYS: the wait list and the --fair queue): a lease cut shorter than
// what was left of it (`extend`, the end of --min-hold) will end with no release to wake
// the waiters, who sleep by the PTTL they saw; so it says "shortened" there and to the
// first waiters (k_wake), with an id as a release's (12 hex digits of SHA1 of token and
// ttl: the same on every server, another than its release's), and they look again. A
// renewal, which only lengthens the lease, goes without them and says nothing.
// The parts both renew scripts share: the token and metadata first, the lock and the
// notice last.
inline constexpr auto k_renew_head = join(
    k_token_check,
    fragment(
        R"lua(if redis.call("pexpire", KEYS[2], ARGV[2]) == 1 then redis.call("hset", KEYS[2], "ttl_ms", ARGV[2]) end
)lua",
        {.calls = {"pexpire", "hset"}}));
inline constexpr auto k_renew_tail =
    join(k_wake,
         fragment(R"lua(local shorter = ARGV[3] and tonumber(ARGV[2]) < redis.call("pttl", KEYS[1])
local renewed = redis.call("pexpire", KEYS[1], ARGV[2])
if shorter then
  local payload = "shortened " .. redis.sha1hex(ARGV[1] .. " " .. ARGV[2]):sub(1, 12)
  redis.pcall("publish", ARGV[3], payload)
  if ARGV[4] then wake({KEYS[#KEYS - 1], KEYS[#KEYS]}, ARGV[4], payload, KEYS[#KEYS - 1]) end
end
return renewed)lua",
                  {.calls = {"pttl", "pexpire"}, .pcalls = {"publish"}}));
inline constexpr auto k_renew_text = compose(k_renew_head, k_renew_tail);
inline constexpr Script k_renew_script = script(k_renew_text);

// Compare-and-delete of the lock and its metadata (ARGV[1] token). Then, if ARGV[2] names
// the release channel ({<key>}:released, in the key's hash slot) and the lock is free here
// (deleted, or never ours here), "released ID" there (`redlock watch`, waiters refused
// their wake channel, and those of older versions listen), and with ARGV[3], the wake
// channels' prefix,
// to the first waiters of the wait list and the --fair queue (the last two KEYS; k_wake),
// marking the first woken on the wait list unless ARGV[4] is "0" (Lock::release: over
// several servers only the leader marks, as only the leader sees every woken attempt).
// ID is the release's: 12 hex digits of SHA1(token), not the token, which is still valid
// on servers the release has not reached yet; a waiter listening to several servers wakes
// once for one release, not once per server. A --limit permit's release (ARGV[5], its
// number) says which permit it freed, "released ID pI": the waiter it wakes tries that
// one first instead of trying the held ones in turn (an older waiter takes "ID pI" whole
// as the release's ID, the same on every server). Returns 1 when deleted, 0 when not ours.
// The parts both release scripts share: compare-and-delete (or "not ours, but free here"),
// and the notice.
inline constexpr auto k_release_head =
    fragment(R"lua(local deleted, lists = 0, {KEYS[#KEYS - 1], KEYS[#KEYS]}
if redis.call("get", KEYS[1]) == ARGV[1] then
  redis.call("del", KEYS[1], KEYS[2])
  deleted = 1
elseif redis.call("exists", KEYS[1]) == 1 then
  return 0
end
)lua",
             {.calls = {"get", "del", "exists"}});
inline constexpr auto k_release_notice = join(k_wake, fragment(R"lua(if ARGV[2] then
  local payload = "released " .. redis.sha1hex(ARGV[1]):sub(1, 12)
  if ARGV[5] then payload = payload .. " p" .. ARGV[5] end
  redis.pcall("publish", ARGV[2], payload)
  local marks = ARGV[4] ~= "0" and KEYS[#KEYS - 1]
  if ARGV[3] then wake(lists, ARGV[3], payload, marks) end
end
return deleted)lua",
                                                               {.pcalls = {"publish"}}));
inline constexpr auto k_release_text = compose(k_release_head, k_release_notice);
inline constexpr Script k_release_script = script(k_release_text);

// How the record keeps a list of values (a history entry, the --once-per record) under a
// name: joined by NULs, in pieces of at most 63 bytes (name, name:2 .. name:4), so that the
// hash keeps its compact encoding; one piece, whole, when longer than four, or when `whole`
// (a record of many entries is no longer compact: its entries cost one field each).
// `pieces(name)`: the fields a list may have. `unblob(parts)`: the list stored in `parts`
// (its pieces as HMGET gives them), nil when there is none. `had(parts)`: how many pieces.
// `blob(out, name, values, whole, had)`: appends to `out` the field/value pairs that store
// `values` (strings or numbers below 10^14: Lua writes larger ones with an exponent), the
// trailing empty ones left out, and "" for the pieces beyond them of the `had` it replaces.
inline constexpr auto k_blob = fragment(R"lua(local function pieces(name)
  return {name, name .. ":2", name .. ":3", name .. ":4"}
end
local function unblob(parts)
  local text = ""
  for i = 1, 4 do
    if not parts[i] or parts[i] == "" then break end
    text = text .. parts[i]
  end
  if text == "" then return nil end
  local values = {}
  for v in string.gmatch(text .. "\0", "([^%z]*)%z") do values[#values + 1] = v end
  return values
end
local function had(parts)
  local n = 0
  for i = 1, 4 do if parts[i] and parts[i] ~= "" then n = i end end
  return n
end
local function blob(out, name, values, whole, was)
  local n = #values
  while n > 1 and values[n] == "" do n = n - 1 end
  local text = table.concat(values, "\0", 1, n)
  local count = (whole or #text > 252) and 1 or math.max(math.ceil(#text / 63), 1)
  for i = 1, math.max(count, was or 0) do
    out[#out + 1] = i == 1 and name or name .. ":" .. i
    out[#out + 1] = i > count and "" or count == 1 and text or string.sub(text, i * 63 - 62, i * 63)
  end
end
)lua");

// A history entry's values, in this order (lock/history.hpp names them). `fields_of(names,
// values)`: a list of values as a map of `names`, the empty ones left out; `values_of(names,
// map)`: the other way ("" for those it has not); `pairs_of(names, map, clip)`: its
// field/value pairs in the order of `names`, each value clipped to `clip` bytes if given.
inline constexpr auto k_entry_fields = fragment(
    R"lua(local entry_fields = {"run", "started_ms", "waited_ms", "held_ms", "outcome", "status", "fence", "slot_ms", "host", "pid", "user", "command", "by_host", "by_pid", "by_user", "note", "slot"}
local function fields_of(names, values)
  local m = {}
  for i, f in ipairs(names) do
    if values[i] and values[i] ~= "" then m[f] = values[i] end
  end
  return m
end
local function values_of(names, m)
  local v = {}
  for i, f in ipairs(names) do v[i] = m[f] ~= nil and m[f] or "" end
  return v
end
local function pairs_of(names, m, clip)
  local out = {}
  for _, f in ipairs(names) do
    if m[f] then
      out[#out + 1] = f
      out[#out + 1] = clip and string.sub(m[f], 1, clip) or m[f]
    end
  end
  return out
end
)lua");

// The record of the last --once-per run (k_claim_slot_script, k_finish_slot_script): its
// values, in this order. Who ran it, and when, it leaves to the newest history entry while
// that is its run's (k_history_script): `slot_record(parts, e)` is the record stored in
// `parts` as a map, with what it left to `e` (the newest entry, a map) taken back; nil when
// there is none.
inline constexpr auto k_slot_fields = fragment(
    R"lua(local slot_fields = {"slot", "slot_ms", "run", "started_ms", "ended_ms", "status", "start_error", "host", "pid", "user", "command"}
local function slot_record(parts, e)
  local values = unblob(parts)
  if not values then return nil end
  local s = fields_of(slot_fields, values)
  if e and s.run and e.run == s.run and not s.host then
    local started = (tonumber(e.started_ms) or 0) + (tonumber(e.waited_ms) or 0)
    s.started_ms = s.started_ms or started
    s.ended_ms = s.ended_ms or started + (tonumber(e.held_ms) or 0)
    s.status = s.status or e.status
    s.host, s.pid, s.user, s.command = e.host, e.pid, e.user, e.command
  end
  return s
end
)lua");

// A `redlock cron` job's slot record, fields of the name's record (lock/cron_scripts.hpp has
// them): `cron_fields`; `cron_pairs(values, at, out, clip)` appends to `out` the field/value
// pairs of those of `values` (an HMGET's reply, `cron_fields` from index `at`) that are
// there, each clipped to `clip` bytes.
inline constexpr auto k_cron_fields = fragment(
    R"lua(local cron_fields = {"c", "cs", "ch", "cb", "ce", "cx", "ck", "cn", "cw", "cz"}
local function cron_pairs(values, at, out, clip)
  for i, f in ipairs(cron_fields) do
    local v = values[at + i - 1]
    if v and v ~= "" then
      out[#out + 1] = f
      out[#out + 1] = string.sub(v, 1, clip)
    end
  end
  return out
end
)lua");

// The counters of a name (fleet/read.hpp's, in the record's short names): runs by outcome
// ("r:<outcome>"); for a run that ran PROGRAM (any outcome but a skip (of a held lock, a
// slot, or a cron overlap), a missed cron slot, giving up, an interruption, a failure to
// start, the operator's force-release entry, or a reaped one: how long that run held is not
// known) a duration bucket ("d<seconds>", the first bound at or
// above the time held, fleet::k_duration_buckets; else "d+") +1, the time held added to
// "ds", and when it ended ("lr"); "ls" when one that ran exited 0; "sl" the --once-per slot.
// Outcomes not in `counter_outcomes` (a newer version's) are not counted. `add_run(c, e,
// now)` adds the run of entry `e` (a map) to the counters `c` (a map of the record's fields).
// The two times never go back: the entry of an earlier run that arrives late (its server was
// frozen) leaves a later one in place (unless that one is past `now`, the server's TIME if
// given: no run ended then).
inline constexpr auto k_run_counters = fragment(
    R"lua(local counter_outcomes = {"ran", "lost", "force-released", "max-hold", "skipped-held", "skipped-slot", "gave-up", "interrupted", "stopped", "failed", "killed", "force-release", "reaped", "skipped-overlap", "missed"}
local idle = {["skipped-held"] = 1, ["skipped-slot"] = 1, ["gave-up"] = 1, ["interrupted"] = 1, ["failed"] = 1, ["force-release"] = 1, ["reaped"] = 1, ["skipped-overlap"] = 1, ["missed"] = 1}
local bounds = {1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400}
local counter_names, known = {"ds", "lr", "ls", "sl", "d+"}, {}
for _, o in ipairs(counter_outcomes) do
  counter_names[#counter_names + 1] = "r:" .. o
  known[o] = true
end
for _, b in ipairs(bounds) do counter_names[#counter_names + 1] = "d" .. b end
local function add_run(c, e, now)
  local o = e.outcome
  if not o or not known[o] then return end
  c["r:" .. o] = (tonumber(c["r:" .. o]) or 0) + 1
  if not idle[o] then
    local held = tonumber(e.held_ms) or 0
    local bucket = "d+"
    for _, b in ipairs(bounds) do
      if held <= b * 1000 then
        bucket = "d" .. b
        break
      end
    end
    c[bucket] = (tonumber(c[bucket]) or 0) + 1
    c.ds = (tonumber(c.ds) or 0) + held
    local ended = (tonumber(e.started_ms) or 0) + (tonumber(e.waited_ms) or 0) + held
    local function latest(old)
      old = tonumber(old)
      if old and old > ended and (not now or old <= now) then return old end
      return ended
    end
    c.lr = latest(c.lr)
    if o == "ran" and e.status == "0" then c.ls = latest(c.ls) end
  end
  if e.slot_ms then c.sl = e.slot_ms end
end
)lua");

// The token, remaining TTL (ms), metadata and fence counter of a lock (KEYS: the lock, its
// metadata, the name's record; ARGV[1] the record's fence field), and the record of its last
// --once-per run if ARGV[2] is given ({} if not); {nil, -2, {}, fence, record} when free (the
// counter outlives the lock). A record that is 0.4's counter (a string) is read as it is. Of
// the metadata, only the fields redlock reads (lock/holder.hpp, k_holder_field_names), as
// field/value pairs, each value clipped to 4 KiB: a hash that another client wrote there may
// have any number of fields of any size, and is read as far as it can be, never into a reply
// too large to read. The --once-per record's the same way, its run's id as "token".
inline constexpr auto k_inspect_text =
    compose(k_blob, k_entry_fields, k_slot_fields, k_cron_fields,
            fragment(R"lua(local function fields(key, names)
  local values = redis.call("hmget", key, unpack(names))
  local out = {}
  for i, name in ipairs(names) do
    local v = values[i]
    if v then
      out[#out + 1] = name
      out[#out + 1] = string.sub(v, 1, 4096)
    end
  end
  return out
end
local token = redis.call("get", KEYS[1])
local fence, last = false, {}
local names = {ARGV[1]}
if ARGV[2] then
  names = {ARGV[1], "s", "s:2", "s:3", "s:4", "e", "e:2", "e:3", "e:4"}
  for _, f in ipairs(cron_fields) do names[#names + 1] = f end
end
local record = redis.pcall("hmget", KEYS[3], unpack(names))
if record.err then
  fence = redis.pcall("get", KEYS[3])
  if type(fence) ~= "string" then fence = false end
else
  fence = record[1]
  local e = ARGV[2] and unblob({record[6], record[7], record[8], record[9]})
  local s = ARGV[2] and slot_record({record[2], record[3], record[4], record[5]}, e and fields_of(entry_fields, e))
  if s then
    s.token = s.run
    last = pairs_of({"slot", "slot_ms", "token", "started_ms", "ended_ms", "status", "start_error", "host", "pid", "user", "command"}, s, 4096)
  end
  if ARGV[2] then cron_pairs(record, 10, last, 4096) end
end
if not token then return {false, -2, {}, fence, last} end
return {token, redis.call("pttl", KEYS[1]), fields(KEYS[2], {"token", "host", "pid", "user", "command", "acquired_at", "ttl_ms", "process", "pidns", "nest", "machine", "boot", "fence"}), fence, last})lua",
                     {.calls = {"get", "hmget", "pttl"}, .pcalls = {"hmget", "get"}}));
inline constexpr Script k_inspect_script = script(k_inspect_text);

// --once-per: claims the current slot for the run holding the lock (KEYS[1] the lock,
// KEYS[2] the name's record, KEYS[3] 0.4's slot record {<key>}:slot, read when the record has
// none; ARGV[1] our token, ARGV[2] the slot length in ms, ARGV[3] how early a run may start
// and still count for the next slot, ARGV[4] the history's age (k_keep_record), ARGV[5] the
// run's id, ARGV[6..] its host, pid, user and command as field/value pairs). The slot is
// counted on this server's clock (TIME) from the Unix epoch. The record is a max-register of
// slot numbers: a slot is claimed only where no run of it (or of a later one) is recorded,
// so two runs of one slot cannot both win a majority. It is kept at least until one whole
// slot after the one it records (k_keep_record: two slots from now). A run of this slot
// whose PROGRAM could not be started (its record has a start_error, k_finish_slot_script)
// did not use it up: the slot can be claimed again, but not an earlier one. Returns 1
// claimed, -1 the slot has been run (or is running), 0 the lock no longer holds our token.
inline constexpr auto k_claim_slot_text =
    compose(k_token_check, k_server_now, k_keep_record, k_blob,
            fragment(R"lua(local length = tonumber(ARGV[2])
local slot = math.floor((now + tonumber(ARGV[3])) / length)
local parts = redis.call("hmget", KEYS[2], "s", "s:2", "s:3", "s:4")
local was = unblob(parts)
if not was then was = redis.call("hmget", KEYS[3], "slot", "slot_ms", "token", "started_ms", "ended_ms", "status", "start_error") end
local last = tonumber(was[1] or "")
if last and (last > slot or (last == slot and (was[7] or "") == "")) then return -1 end
local who = {}
for i = 6, #ARGV - 1, 2 do who[ARGV[i]] = ARGV[i + 1] end
local set = {}
blob(set, "s", {slot, length, ARGV[5], now, "", "", "", who.host or "", who.pid or "", who.user or "", who.command or ""}, false, had(parts))
redis.call("hset", KEYS[2], unpack(set))
keep_record(KEYS[2], ARGV[4], length)
return 1)lua",
                     {.calls = {"hmget", "hset"}}));
inline constexpr Script k_claim_slot_script = script(k_claim_slot_text);

// --once-per, when the run is over: records its end (this server's TIME) and exit status
// in the slot record if it is still its run's (KEYS[1] the record; ARGV[1] the run's id,
// ARGV[2] the status, ARGV[3] the history's age and ARGV[4] the slot, k_keep_record: kept
// from now on). ARGV[5], when given, says why PROGRAM could not be started (start_error):
// the record stays, for status, but the slot is open again (k_claim_slot_script). Returns 1
// recorded, 0 not its run's (expired, or a later slot's run).
inline constexpr auto k_finish_slot_text =
    compose(k_keep_record, k_blob,
            fragment(R"lua(local parts = redis.call("hmget", KEYS[1], "s", "s:2", "s:3", "s:4")
local s = unblob(parts)
if not s or s[3] ~= ARGV[1] then return 0 end
)lua",
                     {.calls = {"hmget"}}),
            k_server_now,
            fragment(R"lua(for i = #s + 1, 7 do s[i] = "" end
s[5], s[6] = now, ARGV[2]
if ARGV[5] then s[7] = ARGV[5] end
local set = {}
blob(set, "s", s, false, had(parts))
redis.call("hset", KEYS[1], unpack(set))
keep_record(KEYS[1], ARGV[3], ARGV[4])
return 1)lua",
                     {.calls = {"hset"}}));
inline constexpr Script k_finish_slot_script = script(k_finish_slot_text);

// release --force of a lock key that is not a string (a hash someone wrote there): deletes
// KEYS[1] only if GET still fails with WRONGTYPE, so that a lock taken meanwhile is never
// removed. Needs only the GET and DEL that release needs.
inline constexpr auto k_remove_wrong_type_text =
    compose(fragment(R"lua(local value = redis.pcall("get", KEYS[1])
if type(value) == "table" and value.err and string.find(value.err, "WRONGTYPE", 1, true) then
  return redis.call("del", KEYS[1])
end
return 0)lua",
                     {.calls = {"del"}, .pcalls = {"get"}}));
inline constexpr Script k_remove_wrong_type_script = script(k_remove_wrong_type_text);

// --limit N: a semaphore of N permits, each a lock of its own (a key, metadata and fence
// counter, lock/name.hpp permit_key), so that over several servers each permit is a
// Redlock lock and no more than N can ever be held. The name's own lock key is then a
// sorted set of the permit holders' tokens by the server TIME (ms) their lease ends, with
// the limit in {<key>}:limit: a plain lock of the name (SET NX) finds the key taken, and a
// permit is not given while a plain lock holds the name (anything but a sorted set there:
// the pcall on it fails, WRONGTYPE). Both expire when the last lease given or renewed while
// the set had holders ends (never before a live holder's): an acquisition moves them later
// with PEXPIREAT GT, to the end of the sixteenth of its lease in which its lease ends (so
// up to a sixteenth later: the acquisitions after it in that time move neither, and the
// limit is moved only when the set was, PEXPIREAT's 1; the two always expire together);
// Redis 6 has no GT: there, to the longest lease the set holds (and 6.0 has no SET PXAT:
// the limit's expiry goes as PX, counted from the script's TIME, so a moment after the
// set's, never before; redis.REDIS_VERSION, Redis 7's, tells them apart). A release that leaves
// the set empty deletes them, one that leaves holders does not shorten them (a command a
// hand-over saved). Holders whose lease is over (by the server's clock)
// are dropped by an attempt that would otherwise find every permit held, or the limit
// disagreed on, when the soonest lease has ended (read first: most such attempts find
// none over, and cost no pruning). The limit is not read while the set has no holders (it
// is then written anew). A release that leaves holders wakes only the wait list: the
// --fair queue holds plain locks' waiters, who can take the name only once it is empty.
// KEYS: 1 the
// permit, 2 its metadata, 3 the name's record, 4 the name's lock key, 5 the limit; ARGV[1]
// the token, ARGV[2] the ttl ms.

// Acquire a permit (KEYS[6] its 0.4 fence counter, taken over; ARGV[3] to ARGV[5] as
// k_acquire_script's: the record's keeping and the permit's fence field; ARGV[6] N; holder
// fields from ARGV[7]); the fence as k_acquire_script (k_fence_take), once the permit is set.
// Held: -2 - PTTL of the permit (or of the plain lock holding the name). Holders with
// another limit: the error "LIMIT <theirs>". Every permit held (N live holders): no
// permit is tried, and the reply is -2 - k_every_permit_held - the ms until the first
// lease ends, so that the client tries no other permit (held_pttl, every_permit_held). A
// waiter names itself with a seventh KEY, the name's wait list, as a plain lock's waiter
// does (ARGV[7] its place, ARGV[8] "1" when it may be listed already, ARGV[9] its id;
// holder fields then from ARGV[10]): it enlists when every permit is held, and leaves with
// the permit it takes, so that a release wakes the first two waiters (k_wake), not every
// one, and tells them which permit it freed (k_release_notice).
inline constexpr auto k_acquire_permit_text = compose(
    k_fence_take, k_server_now,
    fragment(R"lua(local holders = redis.pcall("zcard", KEYS[4])
if type(holders) == "table" then return -2 - redis.call("pttl", KEYS[4]) end
local limit = holders > 0 and tonumber(redis.call("get", KEYS[5]) or "")
local n = tonumber(ARGV[6])
local soonest = nil
if holders >= n or (limit and limit ~= n) then
  soonest = tonumber(redis.call("zrange", KEYS[4], 0, 0, "WITHSCORES")[2])
  if soonest <= now then
    redis.call("zremrangebyscore", KEYS[4], "-inf", now)
    holders = redis.call("zcard", KEYS[4])
    soonest = nil
  end
end
if limit and limit ~= n and holders > 0 then
  return redis.error_reply("LIMIT " .. limit)
end
if holders >= n then
  if #KEYS == 7 and redis.pcall("zadd", KEYS[7], ARGV[7], ARGV[9]) == 1 then redis.pcall("pexpire", KEYS[7], 7200000) end
  soonest = soonest or tonumber(redis.call("zrange", KEYS[4], 0, 0, "WITHSCORES")[2])
  return -2 - 281474976710656 - math.max(soonest - now, 0)
end
if not redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return -2 - redis.call("pttl", KEYS[1]) end
local fence, failed = take_fence(KEYS[6])
if failed then return failed end
)lua",
             {.calls = {"pttl", "get", "zrange", "zremrangebyscore", "zcard", "set"},
              .pcalls = {"zcard", "zadd", "pexpire"}}),
    fragment(
        R"lua(if #KEYS == 7 and ARGV[8] == "1" then redis.pcall("zrem", KEYS[7], ARGV[9]) end
local ends = now + tonumber(ARGV[2])
redis.call("zadd", KEYS[4], ends, ARGV[1])
local step = math.max(math.floor(tonumber(ARGV[2]) / 16), 1)
local moved = holders > 0 and limit and redis.pcall("pexpireat", KEYS[4], ends - ends % step + step, "GT")
if type(moved) == "number" then
  if moved == 1 then redis.call("pexpireat", KEYS[5], ends - ends % step + step, "GT") end
else
  if holders > 0 then ends = math.max(ends, tonumber(redis.call("zrange", KEYS[4], -1, -1, "WITHSCORES")[2])) end
  redis.call("pexpireat", KEYS[4], ends)
  if redis.REDIS_VERSION then redis.call("set", KEYS[5], ARGV[6], "PXAT", ends) else redis.call("set", KEYS[5], ARGV[6], "PX", ends - now) end
end
local first = #KEYS == 7 and 10 or 7
)lua",
        {.calls = {"zadd", "pexpireat", "zrange", "set"}, .pcalls = {"zrem", "pexpireat"}}),
    k_write_meta,
    fragment(R"lua(redis.pcall("publish", "{" .. KEYS[4] .. "}:events", "acquired")
return fence)lua",
             {.pcalls = {"publish"}}));
inline constexpr Script k_acquire_permit_script = script(k_acquire_permit_text);

// Renew a permit: as k_renew_script (ARGV[3] the release channel, for a lease cut short),
// and its holder's entry in the name's set moves on with it (never over a plain lock that
// took the name meanwhile: the pcall fails there).
inline constexpr auto k_renew_permit_text = compose(
    k_renew_head, k_server_now,
    fragment(
        R"lua(if type(redis.pcall("zadd", KEYS[4], now + tonumber(ARGV[2]), ARGV[1])) == "number" then
  local last = redis.call("zrange", KEYS[4], -1, -1, "WITHSCORES")[2]
  redis.call("pexpireat", KEYS[4], last)
  redis.call("pexpireat", KEYS[5], last)
end
)lua",
        {.calls = {"zrange", "pexpireat"}, .pcalls = {"zadd"}}),
    k_renew_tail);
inline constexpr Script k_renew_permit_script = script(k_renew_permit_text);

// Release a permit (ARGV[2] the release channel, ARGV[5] the permit's number): as
// k_release_script, and its holder leaves the name's set, which goes (with the limit) with
// its last holder. Only then is the --fair queue woken too (its waiters, a plain lock's,
// can take the name only then): a hand-over among permits costs no look at it.
inline constexpr auto k_release_permit_text =
    compose(k_release_head,
            fragment(
                R"lua(if type(redis.pcall("zrem", KEYS[4], ARGV[1])) == "number" then
  if redis.call("zcard", KEYS[4]) == 0 then redis.call("del", KEYS[5]) else lists = {lists[1]} end
end
)lua",
                {.calls = {"zcard", "del"}, .pcalls = {"zrem"}}),
            k_release_notice);
inline constexpr Script k_release_permit_script = script(k_release_permit_text);

// --fair: leave the queue (KEYS[1] queue, KEYS[2] last attempts; ARGV[1] the waiter's id,
// ARGV[2] the wake channels' prefix), when a waiter gives up. One of the first two leaving
// may have been the one a release woke: the next ones are woken in its place.
inline constexpr auto k_fair_leave_text =
    compose(k_wake, fragment(R"lua(local rank = redis.call("zrank", KEYS[1], ARGV[1])
redis.call("zrem", KEYS[2], ARGV[1])
local left = redis.call("zrem", KEYS[1], ARGV[1])
if rank and rank < 2 and ARGV[2] then wake({KEYS[1]}, ARGV[2], "released " .. redis.sha1hex(ARGV[1]):sub(1, 12), false) end
return left)lua",
                             {.calls = {"zrank", "zrem"}}));
inline constexpr Script k_fair_leave_script = script(k_fair_leave_text);

// The history of a name (lock/keys.hpp: kept in its record), one entry per run that reached
// a decision, sent in the same write as the request that decided it (the release, or a
// refused attempt): KEYS[1] the record, KEYS[2] the name's lock key, KEYS[3] its metadata;
// ARGV[1] "run" (always recorded) or "skip" (recorded only where the lock is held by another
// owner, or a --limit name's every permit: the attempt was refused here; it runs right after
// the attempt, in the same write), ARGV[2] the attempt's token (not another owner's), ARGV[3]
// how many entries are kept (1 at least: with history = 0 nothing is sent), ARGV[4] for how
// long (ms), ARGV[5] the ms the run waited, ARGV[6] the ms it held the lock, ARGV[7] the
// entry's field/value pairs, each ended by a NUL (one argument: cheaper to send than
// twenty), ARGV[8] when the run ended (below), ARGV[9] (a `redlock cron` run's) until when
// the record is kept at least (ms since the epoch: its slot's record, lock/cron_scripts.hpp;
// never sooner than it would expire anyway). The entry gets `started_ms`, when the run
// started, and for a skip the holder that refused it (`by_host`, `by_pid`, `by_user`), from
// its metadata.
//
// `ended`: when the run ended, ARGV[8] (ms since the Unix epoch, its host's clock), not when
// the request arrived, which is later by as long as this server was frozen or cut off; never
// in the future of this server's TIME (a host clock ahead: TIME, as when ARGV[8] is missing
// or not a time), so never a time no run has reached, and never before the run's start
// (waited and held are never negative). The counters' times never go back (k_run_counters).
//
// The entry becomes the newest (e), and the one it replaces is counted (k_run_counters: the
// counters are of the runs before the newest, so that a name run once keeps none) and kept
// under its number, while ARGV[3] allows. Entries past the count are dropped once they are a
// sixteenth of it past (one HDEL for many writes: a trim costs a command per run in a
// crowd), past the age by one write in eight (by the server's clock), a few at a time. A
// --once-per run's entry takes from the slot record who ran it and when, which it would
// otherwise say twice; the slot record takes them back when the entry is no longer the
// newest (k_slot_fields). The record expires with the age (k_keep_record) from the
// acquisition, which pushes it back: a write pushes it back again when its run did not
// acquire, held a sixteenth of the age or more, or finds no record (a command saved for most
// runs). "run" on the events channel ({<key>}:events), once the entry is written, tells
// `redlock watch`.
//
// Once per run: a run's entry ("run", with its id in the field "run") can come twice, from
// the run and from the releaser of a run killed while its release waited (job/dead_run.hpp:
// it sends the release and the entry again, and a server frozen or cut off runs both once it
// answers). An entry whose run is the newest's, or one of the five before (`ids`: the first
// 12 hex digits of each, 48 random bits, newest first, space-separated: at most 64 bytes, so
// that the record stays a listpack), is refused whole (the script returns 0, having written
// nothing), so that neither the history nor the counters have the run twice. Six: between a
// run's two entries, no other run can finish on a majority (the run's release was waiting
// for one), only a few --limit holders' and the operator's. Refusals ("skip") are sent once,
// and not looked at. Returns 1 when recorded, 0 when not.
inline constexpr auto k_history_text = compose(
    k_keep_record, k_blob, k_entry_fields, k_slot_fields, k_run_counters,
    fragment(R"lua(local holder = false
if ARGV[1] == "skip" then
  local kind = redis.call("type", KEYS[2]).ok
  if kind == "none" then return 0 end
  if kind == "string" then
    holder = redis.call("get", KEYS[2])
    if holder == ARGV[2] then return 0 end
  elseif kind == "zset" and redis.call("zscore", KEYS[2], ARGV[2]) then
    return 0
  end
end
)lua",
             {.calls = {"type", "get", "zscore"}}),
    k_server_now,
    fragment(R"lua(local keep, age = tonumber(ARGV[3]), tonumber(ARGV[4])
if keep < 1 then return 0 end
local ended = tonumber(ARGV[8] or "")
if not ended or ended < 0 or ended > now then ended = now end
local e = {started_ms = ended - tonumber(ARGV[5]) - tonumber(ARGV[6]), waited_ms = ARGV[5], held_ms = ARGV[6]}
if holder then
  local by = redis.call("hmget", KEYS[3], "token", "host", "pid", "user")
  if by[1] == holder then
    for i, f in ipairs({"by_host", "by_pid", "by_user"}) do
      if by[i + 1] then e[f] = string.gsub(by[i + 1], "%z", "?") end
    end
  end
end
for field, value in string.gmatch(ARGV[7] or "", "([^%z]*)%z([^%z]*)%z") do e[field] = value end
local names = {"f", "h", "ids", "e", "e:2", "e:3", "e:4", "s", "s:2", "s:3", "s:4"}
for _, n in ipairs(counter_names) do names[#names + 1] = n end
local got = redis.call("hmget", KEYS[1], unpack(names))
local r, fresh = {}, true
for i, n in ipairs(names) do
  r[n] = got[i] or nil
  if got[i] then fresh = false end
end
local newest_parts = {got[4], got[5], got[6], got[7]}
local was = unblob(newest_parts)
was = was and fields_of(entry_fields, was)
local ids = r.ids or ""
if ARGV[1] == "run" and e.run and e.run ~= "" and was and (was.run == e.run or string.find(" " .. ids .. " ", " " .. string.sub(e.run, 1, 12) .. " ", 1, true)) then return 0 end
local set, del = {}, {}
local first, last = string.match(r.h or "", "^(%d+) (%d+)")
first, last = tonumber(first), tonumber(last)
local function drop(from, to)
  to = math.min(to, from + 255)
  for n = from, to do
    for _, p in ipairs(pieces(tostring(n))) do del[#del + 1] = p end
  end
  return to + 1
end
if was then
  add_run(r, was, now)
  for _, n in ipairs(counter_names) do
    if r[n] then
      set[#set + 1] = n
      set[#set + 1] = r[n]
    end
  end
  if was.run then
    local kept = {string.sub(was.run, 1, 12)}
    for id in string.gmatch(ids, "%S+") do
      if #kept == 5 then break end
      kept[#kept + 1] = id
    end
    set[#set + 1] = "ids"
    set[#set + 1] = table.concat(kept, " ")
  end
  if keep > 1 then
    last = (last or 0) + 1
    first = first or last
    blob(set, tostring(last), values_of(entry_fields, was), last - first >= 24)
  end
end
if last then
  if last - first + 1 > keep - 1 + math.floor(keep / 16) then first = drop(first, last - keep + 1) end
  if now % 8 == 0 and first <= last then
    local oldest = {}
    for n = first, math.min(first + 15, last) do oldest[#oldest + 1] = tostring(n) end
    for _, piece in ipairs(redis.call("hmget", KEYS[1], unpack(oldest))) do
      if not piece or (tonumber(string.match(piece, "^[^%z]*%z(%d+)")) or now) >= now - age then break end
      first = drop(first, first)
    end
  end
  set[#set + 1] = "h"
  set[#set + 1] = first .. " " .. last .. " " .. keep
end
local slot = unblob({r.s, r["s:2"], r["s:3"], r["s:4"]})
if slot then
  if was and slot[3] == was.run and (slot[8] or "") == "" then
    local back = slot_record({r.s, r["s:2"], r["s:3"], r["s:4"]}, was)
    blob(set, "s", values_of(slot_fields, back), false, had({r.s, r["s:2"], r["s:3"], r["s:4"]}))
  elseif e.slot_ms and slot[3] == e.run and (slot[7] or "") == "" then
    blob(set, "s", {slot[1], slot[2], slot[3]}, false, had({r.s, r["s:2"], r["s:3"], r["s:4"]}))
  end
end
blob(set, "e", values_of(entry_fields, e), last and last - first >= 24, had(newest_parts))
redis.call("hset", KEYS[1], unpack(set))
if #del > 0 then redis.call("hdel", KEYS[1], unpack(del)) end
if fresh or not e.outcome or idle[e.outcome] or tonumber(ARGV[6]) >= age / 16 then keep_record(KEYS[1], age, e.slot_ms) end
local keep_until = tonumber(ARGV[9])
if keep_until then
  local ttl = redis.call("pttl", KEYS[1])
  if ttl >= 0 and now + ttl < keep_until then redis.call("pexpireat", KEYS[1], keep_until) end
end
redis.pcall("publish", "{" .. KEYS[2] .. "}:events", "run")
return 1)lua",
             {.calls = {"hmget", "hset", "hdel", "pttl", "pexpireat"}, .pcalls = {"publish"}}));
inline constexpr Script k_history_script = script(k_history_text);

// One page of a name's history, newest first (KEYS[1] the record; ARGV[1] the number of the
// entry to read back from, inclusive, or "+" for the newest; ARGV[2] how many entries), at
// most as many as the last write kept; each entry as {number, {field, value, ...}}, but
// with each entry costing 96 plus 32 a field or value plus their bytes: an entry costing
// more than ARGV[3] (another client's) is returned as its number alone, and the page ends
// before ARGV[4] (with one entry at least). So a reply stays within what the reader takes
// (redis/reader.hpp) however large the entries or the page asked for. Returns {more,
// entries}: more is 1 when the history goes on past them. 0.4's fence counter (a string)
// has no history.
inline constexpr auto k_history_page_text =
    compose(k_blob, k_entry_fields,
            fragment(
                R"lua(local head = redis.pcall("hmget", KEYS[1], "h", "e")
if head.err then
  if redis.call("type", KEYS[1]).ok == "string" then return {0, {}} end
  return head
end
if not head[2] then return {0, {}} end
local first, last, keep = string.match(head[1] or "", "^(%d+) (%d+) (%d+)")
local newest = (tonumber(last) or 0) + 1
local oldest = tonumber(first) or newest
if keep then oldest = math.max(oldest, newest - tonumber(keep) + 1) end
local from = ARGV[1] == "+" and newest or math.min(tonumber(ARGV[1]) or newest, newest)
local lowest = math.max(oldest, from - tonumber(ARGV[2]) + 1)
if from < lowest then return {0, {}} end
local names = {}
for n = from, lowest, -1 do
  for _, p in ipairs(pieces(n == newest and "e" or tostring(n))) do names[#names + 1] = p end
end
local got = redis.call("hmget", KEYS[1], unpack(names))
local entry_limit, page_limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local out, total = {}, 0
for n = from, lowest, -1 do
  local at = (from - n) * 4
  local values = unblob({got[at + 1], got[at + 2], got[at + 3], got[at + 4]})
  if values then
    local id = tostring(n)
    local entry = {id, pairs_of(entry_fields, fields_of(entry_fields, values))}
    local cost = 96 + #id
    for _, part in ipairs(entry[2]) do cost = cost + 32 + #part end
    if cost > entry_limit then entry, cost = {id}, 96 + #id end
    total = total + cost
    if total > page_limit and #out > 0 then return {1, out} end
    out[#out + 1] = entry
  end
end
return {lowest > oldest and 1 or 0, out})lua",
                {.calls = {"type", "hmget"}, .pcalls = {"hmget"}}));
inline constexpr Script k_history_page_script = script(k_history_page_text);

} // namespace redlock::lock
