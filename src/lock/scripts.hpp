#pragma once
// The Lua scripts redlock runs (lock/script.hpp: each with its SHA1 for EVALSHA and the
// commands it calls, both derived when compiling). Keys go only as KEYS and values only as
// ARGV. KEYS[1] is the lock key, KEYS[2] its metadata hash {<key>}:meta, KEYS[3] its fence
// counter {<key>}:fence (same hash slot; the counter has no TTL and is never deleted, or
// fences could go backwards). tests/lock/scripts_test.cpp checks each SHA1 against the
// server's SCRIPT LOAD, and each list of commands against the script's source.

#include "lock/script.hpp"

namespace redlock::lock {

// The fragments that several scripts share, written once.

// Reads the fence counter (KEYS[3]) into `fence` (k_fence_script). Anything but a
// non-negative integer as INCR writes it, below 10^18, is an error, never read as 0, and
// the script stops there, having written nothing.
inline constexpr auto k_fence_check = fragment(R"lua(local fence = redis.call("get", KEYS[3])
if fence and fence ~= "0" and not (#fence <= 18 and string.match(fence, "^[1-9]%d*$")) then return redis.error_reply("ERR fence counter " .. KEYS[3] .. " is not a number") end
)lua",
                                               {.calls = {"get"}});

// Right after a successful SET of KEYS[1]: the next fence, INCR of the counter (KEYS[3]),
// into `fence`. A counter INCR refuses (not an integer as INCR writes it: "007", "5.0",
// "banana"; or at 2^63 - 1) or one that gives no fence from 1 to 10^18 - 1 (a negative counter; one
// that large is no counter of ours) is an error, never read as 0: the INCR is undone, and the SET,
// so that the script has written nothing. Any other failure of the INCR (an ACL that refuses it) is
// returned as it came, after the same undoing. Taking the fence this way, not reading the counter
// before the SET, costs a won attempt one command less (bench/crowd.sh counts them). (A Lua pcall
// around redis.call, not redis.pcall: the INCR is a command the script needs, as doctor checks, not
// one it may do without.)
inline constexpr auto k_fence_take =
    fragment(R"lua(local took, fence = pcall(function() return redis.call("incr", KEYS[3]) end)
if not took or fence < 1 or fence >= 1e18 then
  if took then redis.pcall("decr", KEYS[3]) end
  redis.call("del", KEYS[1])
  local why = type(fence) == "table" and fence.err or tostring(fence)
  if not took and not string.find(why, "integer", 1, true) and not string.find(why, "overflow", 1, true) then return redis.error_reply(why) end
  return redis.error_reply("ERR fence counter " .. KEYS[3] .. " is not a number")
end
)lua",
             {.calls = {"incr", "del"}, .pcalls = {"decr"}});

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

// Round 1 of an acquisition over several servers: SET NX PX; on success the counter is
// incremented (k_fence_take: when it is not a number, the SET is undone and the script
// fails, having written nothing) and the metadata hash (the fence
// and the holder's field/value pairs) is replaced with the same TTL. Returns the
// new counter, the fence this server gives (the client takes the largest over a
// majority, and writes it back in a second round only where the replies differ:
// lock/lock.hpp); when held by another owner, -2 - PTTL (-1: held with no expiry), which
// a waiter sleeps by (k_held_reply). It says "acquired" on the events channel
// ({<key>}:events), which `redlock watch` listens to and no waiter does.
//
// A waiter (KEYS[4] and more) names itself: ARGV[3] its place (below), ARGV[4] the ms
// after which a silent --fair waiter is dropped (without --fair: "1" when it may be on the
// wait list already, "0" on its first attempt), ARGV[5] its id
// (kept while each attempt has a fresh token), ARGV[6] the prefix of the waiters' wake
// channels ({<key>}:w:, lock/keys.hpp), to which its id is appended. The holder's fields
// then start at ARGV[7] (else at ARGV[3]).
//
// With four KEYS (4: the wait list, a sorted set of the waiters by ARGV[3], the ms they
// started waiting), an attempt that finds the lock held enlists the waiter there; one that
// sets it takes the waiter off. A release wakes the first waiters of the list on their
// own channels, not everyone (k_wake).
//
// --fair, with six KEYS (4: the queue, a sorted set of waiters by ticket, ARGV[3]; 5: each
// waiter's last attempt, in the server's TIME ms; 6: the ticket counter): the attempt first
// enrolls us (again, with the same ticket, where we were dropped or never got: one order on
// every server), drops silent waiters at the head, and goes on only when we are the head.
// Else it is not our turn, whether the lock is free or not: "held", with as PTTL the time
// until the head could be dropped, and one such time more for each waiter between it and
// us, at most six (so that someone keeps the queue's keys alive), so that a crowd in the
// queue sleeps (a release wakes the head, k_wake) instead of trying again and again. A head
// silent for ARGV[4] ms that still listens on its wake channel is a waiter asleep until its
// turn, not a dead one: it is woken, and marked (its last attempt set to now + 0.5 ms:
// attempts write whole ms) so that it is dropped if silent for ARGV[4] ms more (frozen).
// The three keys expire 10 x ARGV[4] after the last attempt: renewed by an attempt that
// finds less than 9 x ARGV[4] left on the queue, or none (-1: the queue is new), so that
// most attempts, a newcomer's too, pay one PTTL, not three PEXPIREs. (The counter is
// raised with KEEPTTL: a SET must not make it a key that never expires.) A head whose last attempt
// is later than the server's TIME (its clock stepped back, or a forged entry) is taken as seen now:
// a live waiter keeps its place, and a dead one lapses as any other, instead of holding the queue
// up until that time comes.

// Where the holder's fields start: after a waiter's four arguments, if any.
inline constexpr auto k_waiter_args = fragment(R"lua(local first = 3
if #KEYS > 3 then first = 7 end
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
inline constexpr auto k_fair_enrol =
    fair_only(join(fragment(R"lua(local fair_head = false
local function attempted(now)
  redis.call("zadd", KEYS[5], now, ARGV[5])
  if redis.call("pttl", KEYS[4]) < tonumber(ARGV[4]) * 9 then
    for i = 4, 6 do redis.call("pexpire", KEYS[i], tonumber(ARGV[4]) * 10) end
  end
end
local top = {}
if #KEYS == 6 then
  top = redis.call("zrange", KEYS[4], 0, 0, "WITHSCORES")
  fair_head = top[1] == ARGV[5]
end
if #KEYS == 6 and not fair_head then
)lua"),
                   indented<k_server_now, 2>,
                   fragment(R"lua(  local patience = tonumber(ARGV[4])
  local fresh = redis.call("zadd", KEYS[4], "NX", ARGV[3], ARGV[5]) == 1
  if fresh and tonumber(redis.call("get", KEYS[6]) or 0) < tonumber(ARGV[3]) then redis.call("set", KEYS[6], ARGV[3], "KEEPTTL") end
  attempted(now)
  local head = top[1]
  if fresh and (head == nil or tonumber(top[2]) > tonumber(ARGV[3]) or (tonumber(top[2]) == tonumber(ARGV[3]) and ARGV[5] < head)) then head = ARGV[5] end
  while head and head ~= ARGV[5] do
    local seen = tonumber(redis.call("zscore", KEYS[5], head))
    if seen and seen > now + 1 then
      seen = now
      redis.call("zadd", KEYS[5], "XX", now, head)
    end
    local alive = seen and seen > now - patience
    if seen and not alive and seen % 1 == 0 then
      local n = redis.pcall("pubsub", "numsub", ARGV[6] .. head)
      if type(n) == "table" and not n.err and tonumber(n[2] or 0) > 0 then
        seen = now + 0.5
        redis.call("zadd", KEYS[5], "XX", seen, head)
        redis.pcall("publish", ARGV[6] .. head, "released " .. redis.sha1hex(ARGV[1]):sub(1, 12))
        alive = true
      end
    end
    if alive then
      local behind = (redis.call("zrank", KEYS[4], ARGV[5]) or 1) - 1
      return -2 - math.min(math.floor(seen + patience * (1 + behind) - now), patience * 6)
    end
    redis.call("zrem", KEYS[4], head)
    redis.call("zrem", KEYS[5], head)
    head = redis.call("zrange", KEYS[4], 0, 0)[1]
  end
end
)lua",
                            {.calls = {"zadd", "get", "set", "pttl", "pexpire", "zrange", "zscore",
                                       "zrank", "zrem"},
                             .pcalls = {"pubsub", "publish"}})));
// The head found the lock held (`pttl`, k_lock_pttl): its attempt is recorded now.
inline constexpr auto k_fair_head_held =
    fair_only(join(fragment(R"lua(if fair_head and pttl ~= -2 then
)lua"),
                   indented<k_server_now, 2>, fragment(R"lua(  attempted(now)
end
)lua")));
// After a successful SET: off the wait list, or out of the --fair queue.
inline constexpr auto k_fair_leave = fair_only(fragment(R"lua(  if #KEYS == 6 then
    redis.call("zrem", KEYS[4], ARGV[5])
    redis.call("zrem", KEYS[5], ARGV[5])
  end
)lua",
                                                        {.calls = {"zrem"}}));
inline constexpr auto k_waiter_leave = join(
    fragment(R"lua(  if #KEYS == 4 and ARGV[4] == "1" then redis.pcall("zrem", KEYS[4], ARGV[5]) end
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
// the increment and the metadata; and the reply. They differ only in the "acquired"
// notice.
inline constexpr auto k_acquire_set =
    fragment(R"lua(if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
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
  if #KEYS == 4 and redis.pcall("zadd", KEYS[4], ARGV[3], ARGV[5]) == 1 then redis.pcall("pexpire", KEYS[4], 7200000) end
  if #KEYS == 6 and (pttl == -1 or pttl > tonumber(ARGV[4]) * 3) then pttl = tonumber(ARGV[4]) * 3 end
  return -2 - pttl
end
)lua",
                                                {.pcalls = {"zadd", "pexpire"}});
inline constexpr auto k_acquire_tail = fragment(R"lua(  return fence
end
return -2 - redis.call("pttl", KEYS[1]))lua",
                                                {.calls = {"pttl"}});

inline constexpr auto k_acquire_text =
    compose(k_waiter_args, k_fair_enrol, k_lock_pttl, k_fair_head_held, k_acquire_held,
            k_acquire_set, indented<k_fence_take, 2>, k_waiter_leave, k_acquire_won,
            fragment(R"lua(  redis.pcall("publish", "{" .. KEYS[1] .. "}:events", "acquired")
)lua",
                     {.pcalls = {"publish"}}),
            k_acquire_tail);
inline constexpr Script k_acquire_script = script(k_acquire_text);

// Round 2 over several servers, sent only when the round-1 replies differ (ARGV[1] token,
// ARGV[2] fence): while this server still holds our token, raise its counter to the
// fence, never lowering it, and record the fence in the metadata if there is any. Returns
// 1 when the counter now holds our fence, 0 when the token is gone or the counter is
// already higher.
inline constexpr auto k_fence_text =
    compose(k_token_check, k_fence_check,
            fragment(R"lua(if fence and tonumber(fence) > tonumber(ARGV[2]) then return 0 end
redis.call("set", KEYS[3], ARGV[2])
if redis.call("exists", KEYS[2]) == 1 then redis.call("hset", KEYS[2], "fence", ARGV[2]) end
return 1)lua",
                     {.calls = {"set", "exists", "hset"}}));
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

// The token, remaining TTL (ms), metadata and fence counter of a lock, and the record of
// its last --once-per run if KEYS[4] names it ({} if not); {nil, -2, {}, fence, record} when
// free (the counter outlives the lock: it has no TTL). Of each hash, only the fields redlock
// reads (lock/holder.hpp, k_holder_field_names; the slot record's, k_claim_slot_script's and
// k_finish_slot_script's), as field/value pairs, each value clipped to 4 KiB: a hash that
// another client wrote there may have any number of fields of any size, and is read as far
// as it can be, never into a reply too large to read.
inline constexpr auto k_inspect_text = compose(fragment(R"lua(local function fields(key, names)
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
local fence = redis.call("get", KEYS[3])
local last = KEYS[4] and fields(KEYS[4], {"slot", "slot_ms", "token", "started_ms", "ended_ms", "status", "start_error", "host", "pid", "user", "command"}) or {}
if not token then return {false, -2, {}, fence, last} end
return {token, redis.call("pttl", KEYS[1]), fields(KEYS[2], {"token", "host", "pid", "user", "command", "acquired_at", "ttl_ms", "process", "pidns", "nest", "machine", "boot", "fence"}), fence, last})lua",
                                                        {.calls = {"get", "hmget", "pttl"}}));
inline constexpr Script k_inspect_script = script(k_inspect_text);

// --once-per: claims the current slot for the run holding the lock (KEYS[1] the lock,
// KEYS[2] the slot record {<key>}:slot; ARGV[1] our token, ARGV[2] the slot length in ms,
// ARGV[3] how early a run may start and still count for the next slot, ARGV[4..] the
// run's host, pid, user and command as field/value pairs). The slot is counted on this
// server's clock (TIME) from the Unix epoch. The record is a max-register of slot
// numbers: a slot is claimed only where no run of it (or of a later one) is recorded, so
// two runs of one slot cannot both win a majority. It is kept until one whole slot after
// the one it records. A run of this slot whose PROGRAM could not be started (its record
// has a start_error, k_finish_slot_script) did not use it up: the slot can be claimed
// again, but not an earlier one. Returns 1 claimed, -1 the slot has been run (or is
// running), 0 the lock no longer holds our token.
inline constexpr auto k_claim_slot_text =
    compose(k_token_check, k_server_now,
            fragment(R"lua(local length = tonumber(ARGV[2])
local slot = math.floor((now + tonumber(ARGV[3])) / length)
local last = tonumber(redis.call("hget", KEYS[2], "slot") or "")
if last and (last > slot or (last == slot and not redis.call("hget", KEYS[2], "start_error"))) then return -1 end
redis.call("del", KEYS[2])
redis.call("hset", KEYS[2], "slot", slot, "slot_ms", length, "token", ARGV[1], "started_ms", now, unpack(ARGV, 4))
redis.call("pexpireat", KEYS[2], (slot + 2) * length - tonumber(ARGV[3]))
return 1)lua",
                     {.calls = {"hget", "del", "hset", "pexpireat"}}));
inline constexpr Script k_claim_slot_script = script(k_claim_slot_text);

// --once-per, when the run is over: records its end (this server's TIME) and exit status
// in the slot record if it is still ours (KEYS[1] the record; ARGV[1] our token, ARGV[2]
// the status, ARGV[3] ms the record is kept at least from now on). ARGV[4], when given,
// says why PROGRAM could not be started (start_error): the record stays, for status, but
// the slot is open again (k_claim_slot_script). Returns 1 recorded, 0 not ours (expired,
// or a later slot's run).
inline constexpr auto k_finish_slot_text =
    compose(fragment(R"lua(if redis.call("hget", KEYS[1], "token") ~= ARGV[1] then return 0 end
)lua",
                     {.calls = {"hget"}}),
            k_server_now,
            fragment(R"lua(redis.call("hset", KEYS[1], "ended_ms", now, "status", ARGV[2])
if ARGV[4] then redis.call("hset", KEYS[1], "start_error", ARGV[4]) end
if redis.call("pttl", KEYS[1]) < tonumber(ARGV[3]) then redis.call("pexpire", KEYS[1], ARGV[3]) end
return 1)lua",
                     {.calls = {"hset", "pttl", "pexpire"}}));
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
// permit, 2 its metadata, 3 its fence counter, 4 the name's lock key, 5 the limit; ARGV[1]
// the token, ARGV[2] the ttl ms.

// Acquire a permit (ARGV[3] N, ARGV[4] unused (it was: a single server); holder fields
// from ARGV[5]); the fence as k_acquire_script (k_fence_take), once the permit is set.
// Held: -2 - PTTL of the permit (or of the plain lock holding the name). Holders with
// another limit: the error "LIMIT <theirs>". Every permit held (N live holders): no
// permit is tried, and the reply is -2 - k_every_permit_held - the ms until the first
// lease ends, so that the client tries no other permit (held_pttl, every_permit_held). A
// waiter names itself with a sixth KEY, the name's wait list, as a plain lock's waiter
// does (ARGV[5] its place, ARGV[6] "1" when it may be listed already, ARGV[7] its id;
// holder fields then from ARGV[8]): it enlists when every permit is held, and leaves with
// the permit it takes, so that a release wakes the first two waiters (k_wake), not every
// one, and tells them which permit it freed (k_release_notice).
inline constexpr auto k_acquire_permit_text = compose(
    k_server_now,
    fragment(R"lua(local holders = redis.pcall("zcard", KEYS[4])
if type(holders) == "table" then return -2 - redis.call("pttl", KEYS[4]) end
local limit = holders > 0 and tonumber(redis.call("get", KEYS[5]) or "")
local n = tonumber(ARGV[3])
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
  if #KEYS == 6 and redis.pcall("zadd", KEYS[6], ARGV[5], ARGV[7]) == 1 then redis.pcall("pexpire", KEYS[6], 7200000) end
  soonest = soonest or tonumber(redis.call("zrange", KEYS[4], 0, 0, "WITHSCORES")[2])
  return -2 - 281474976710656 - math.max(soonest - now, 0)
end
if not redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return -2 - redis.call("pttl", KEYS[1]) end
)lua",
             {.calls = {"pttl", "get", "zrange", "zremrangebyscore", "zcard", "set"},
              .pcalls = {"zcard", "zadd", "pexpire"}}),
    k_fence_take,
    fragment(
        R"lua(if #KEYS == 6 and ARGV[6] == "1" then redis.pcall("zrem", KEYS[6], ARGV[7]) end
local ends = now + tonumber(ARGV[2])
redis.call("zadd", KEYS[4], ends, ARGV[1])
local step = math.max(math.floor(tonumber(ARGV[2]) / 16), 1)
local moved = holders > 0 and limit and redis.pcall("pexpireat", KEYS[4], ends - ends % step + step, "GT")
if type(moved) == "number" then
  if moved == 1 then redis.call("pexpireat", KEYS[5], ends - ends % step + step, "GT") end
else
  if holders > 0 then ends = math.max(ends, tonumber(redis.call("zrange", KEYS[4], -1, -1, "WITHSCORES")[2])) end
  redis.call("pexpireat", KEYS[4], ends)
  if redis.REDIS_VERSION then redis.call("set", KEYS[5], ARGV[3], "PXAT", ends) else redis.call("set", KEYS[5], ARGV[3], "PX", ends - now) end
end
local first = #KEYS == 6 and 8 or 5
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

// The counters of a name, kept with its history (KEYS[4], {<key>}:stats, a hash; the
// `redlock exporter` reads them, fleet/read.hpp), from the entry's fields (`fields`, `now`,
// ARGV[6] the ms held): "runs:<outcome>" +1 for every entry; for a run that ran PROGRAM (any
// outcome but a skip, giving up, an interruption, a failure to start, the operator's
// force-release entry, or a reaped one: how long that run held is not known) "last_run_ms"
// (`ended`: when it ended), a duration bucket "d:<seconds>" (the first bound at or above the time
// held, fleet::k_duration_buckets; else "d:+Inf") +1, and "duration_ms" +held; "last_success_ms"
// for one that ran and exited 0; "slot_ms" from a --once-per run's entry. The two times never go
// back: the entry of an earlier run that arrives late (its server was frozen) leaves a later one
// in place (unless that one is past the server's TIME: no run ended then). pcall: counters are a
// help, and never cost the entry.
//
// Expiry: the counters 400 days after the last entry (no TTL would outlive every name ever
// used), the history `age` and a sixteenth more (ARGV[4]). Neither is pushed back by every
// write: a run that ran PROGRAM reads, with its counters, "refreshed_ms", when they last
// were, and pushes both back only once a sixteenth of the shorter has passed since (or with no
// stream kept, ARGV[3] "0": then "refreshed_ms" is 0, so that a stream kept again gets its TTL
// at once); every other entry pushes them back. So a crowd's run costs a read and a write of
// its counters and the entry itself, not two PEXPIREs more (bench/crowd.sh counts commands
// per hand-over). `refresh` says whether this write does.
//
// Once per run: a run's entry ("run", with its id in the field "run") can come twice, from
// the run and from the releaser of a run killed while its release waited (job/dead_run.hpp:
// it sends the release and the entry again, and a server frozen or cut off runs both once it
// answers). "recorded" holds the ids of the last 5 such entries written here (their first 12
// hex digits: 48 random bits), newest first, space-separated; an entry whose id is there is
// refused whole (the script returns 0, having written nothing), so that neither the history
// nor the counters have the run twice. It is read with the counters (no command more for a
// run that ran PROGRAM; a read more for the others) and lives with them. Five: at most 64
// bytes, so that the hash stays a listpack (Redis's hash-max-listpack-value; past it, the
// hash takes some 600 bytes more); and between a run's two entries no other run can finish
// on a majority (the run's release was waiting for one), only a few --limit holders' and the
// operator's. Refusals ("skip") are sent once, and not looked at.
inline constexpr auto k_history_counters =
    fragment(R"lua(local refresh = true
if KEYS[4] then
  local f = {}
  for i = 1, #fields - 1, 2 do f[fields[i]] = fields[i + 1] end
  local outcome = f["outcome"]
  if outcome then
    local idle = {["skipped-held"] = 1, ["skipped-slot"] = 1, ["gave-up"] = 1, ["interrupted"] = 1, ["failed"] = 1, ["force-release"] = 1, ["reaped"] = 1}
    local set = {}
    local once = ARGV[1] == "run" and f["run"] and string.sub(f["run"], 1, 12)
    if once == "" then once = false end
    if idle[outcome] and not once then
      redis.pcall("hincrby", KEYS[4], "runs:" .. outcome, 1)
    else
      local held = tonumber(ARGV[6])
      local bucket = "d:+Inf"
      for _, bound in ipairs({1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400}) do
        if held <= bound * 1000 then bucket = "d:" .. bound break end
      end
      local was = redis.pcall("hmget", KEYS[4], "runs:" .. outcome, bucket, "duration_ms", "refreshed_ms", "recorded", "last_run_ms", "last_success_ms")
      if type(was) ~= "table" or was.err then was = {} end
      if once then
        local recorded = type(was[5]) == "string" and was[5] or ""
        if string.find(" " .. recorded .. " ", " " .. once .. " ", 1, true) then return 0 end
        local ids = {once}
        for id in string.gmatch(recorded, "%S+") do
          if #ids == 5 then break end
          ids[#ids + 1] = id
        end
        set = {"recorded", table.concat(ids, " ")}
      end
      table.insert(set, "runs:" .. outcome) table.insert(set, (tonumber(was[1]) or 0) + 1)
      if not idle[outcome] then
        local last = tonumber(was[4])
        refresh = ARGV[3] == "0" or not last or last > now or now - last >= math.min(age, 34560000000) / 16
        local function latest(old)
          old = tonumber(old)
          if old and old > ended and old <= now then return old end
          return ended
        end
        for _, v in ipairs({bucket, (tonumber(was[2]) or 0) + 1, "duration_ms", (tonumber(was[3]) or 0) + held, "last_run_ms", latest(was[6])}) do table.insert(set, v) end
        if outcome == "ran" and f["status"] == "0" then table.insert(set, "last_success_ms") table.insert(set, latest(was[7])) end
        if refresh then table.insert(set, "refreshed_ms") table.insert(set, ARGV[3] == "0" and 0 or now) end
      end
    end
    if f["slot_ms"] then table.insert(set, "slot_ms") table.insert(set, f["slot_ms"]) end
    if #set > 0 then redis.pcall("hset", KEYS[4], unpack(set)) end
    if refresh then redis.pcall("pexpire", KEYS[4], 34560000000) end
  end
end
)lua",
             {.pcalls = {"hincrby", "hmget", "hset", "pexpire"}});

// Drops the history's (KEYS[1]) entries older than `id` (ms since the epoch): XTRIM MINID,
// which Redis 6 lacks (redis.REDIS_VERSION is Redis 7's): there the entries older are counted
// (XREVRANGE, which reading the history needs anyway; at most ARGV[3], the count kept) and
// trimmed with MAXLEN.
inline constexpr auto k_history_trim = fragment(R"lua(local function trim_before(id)
  if redis.REDIS_VERSION then return redis.call("xtrim", KEYS[1], "MINID", id) end
  local old = #redis.call("xrevrange", KEYS[1], id - 1, "-", "COUNT", ARGV[3])
  if old > 0 then redis.call("xtrim", KEYS[1], "MAXLEN", redis.call("xlen", KEYS[1]) - old) end
end
)lua",
                                                {.calls = {"xtrim", "xrevrange", "xlen"}});

// The history of a name (lock/keys.hpp: {<key>}:history, a stream), one entry per run that
// reached a decision, sent in the same write as the request that decided it (the release,
// or a refused attempt): KEYS[1] the history, KEYS[2] the name's lock key, KEYS[3] its
// metadata, KEYS[4] (if given) its counters; ARGV[1] "run" (always recorded) or "skip" (recorded
// only where the lock is held by another owner, or a --limit name's every permit: the attempt was
// refused here; it runs right after the attempt, in the same write), ARGV[2] the attempt's token
// (not another owner's), ARGV[3] how many entries are kept, ARGV[4] for how long (ms), ARGV[5] the
// ms the run waited, ARGV[6] the ms it held the lock, ARGV[7] the entry's field/value pairs, each
// ended by a NUL (one argument: cheaper to send than twenty). The entry gets `started_ms`, when the
// run started (see `ended`), and for a skip the holder that refused it (`by_host`,
// `by_pid`, `by_user`), from its metadata. Entries past the count are trimmed by every write, past
// the age by one write in eight (by the server's clock: a trim costs a command per run in a crowd),
// and the stream expires with the age (k_history_counters: pushed back once in a while, not by
// every write); "run" on the events channel ({<key>}:events), once the entry and the counters
// are written, tells `redlock watch`. A count of 0 (`history = 0`) writes no entry, only the
// counters (k_history_counters, with KEYS[4]). Returns 1 when recorded, 0 when not (a run's entry
// that is here already: k_history_counters).
//
// `ended`: when the run ended, ARGV[8] (ms since the Unix epoch, its host's clock), not when the
// request arrived, which is later by as long as this server was frozen or cut off; never in the
// future of this server's TIME (a host clock ahead: TIME, as when ARGV[8] is missing or not a
// time), so never a time no run has reached, and never before the run's start (waited and held
// are never negative).
inline constexpr auto k_history_text =
    compose(fragment(R"lua(local holder = false
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
            fragment(R"lua(local age = tonumber(ARGV[4])
local ended = tonumber(ARGV[8] or "")
if not ended or ended < 0 or ended > now then ended = now end
local entry = {"started_ms", ended - tonumber(ARGV[5]) - tonumber(ARGV[6]), "waited_ms", ARGV[5], "held_ms", ARGV[6]}
if holder then
  local by = redis.call("hmget", KEYS[3], "token", "host", "pid", "user")
  if by[1] == holder then
    for i, f in ipairs({"by_host", "by_pid", "by_user"}) do
      if by[i + 1] then table.insert(entry, f) table.insert(entry, by[i + 1]) end
    end
  end
end
local fields = {}
for part in string.gmatch(ARGV[7] or "", "([^%z]*)%z") do
  table.insert(entry, part)
  table.insert(fields, part)
end
)lua",
                     {.calls = {"hmget"}}),
            k_history_counters, k_history_trim,
            fragment(R"lua(if ARGV[3] ~= "0" then
  redis.call("xadd", KEYS[1], "MAXLEN", ARGV[3], "*", unpack(entry))
  if now % 8 == 0 then trim_before(now - age) end
  if refresh then redis.call("pexpire", KEYS[1], age + math.floor(age / 16)) end
  redis.pcall("publish", "{" .. KEYS[2] .. "}:events", "run")
end
return 1)lua",
                     {.calls = {"xadd", "pexpire"}, .pcalls = {"publish"}}));
inline constexpr Script k_history_script = script(k_history_text);

// One page of a name's history, newest first, as XREVRANGE gives it (KEYS[1] the stream;
// ARGV[1] the id to read back from, inclusive, or "+"; ARGV[2] how many entries; ARGV[5]
// an id not to return, the last page's last), but with each entry costing 96 plus 32 a
// field or value plus their bytes: an entry costing more than ARGV[3] (another client's)
// is returned as its id alone, and the page ends before ARGV[4] (with one entry at
// least). So a reply stays within what the reader takes (redis/reader.hpp) however large
// the entries or the page asked for. Returns {more, entries}: more is 1 when the stream
// may go on past them.
inline constexpr auto k_history_page_text = compose(fragment(
    R"lua(local page = redis.call("xrevrange", KEYS[1], ARGV[1], "-", "COUNT", ARGV[2])
local entry_limit, page_limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local out, total = {}, 0
for _, entry in ipairs(page) do
  if entry[1] ~= ARGV[5] then
    local cost = 96 + #entry[1]
    for _, part in ipairs(entry[2]) do cost = cost + 32 + #part end
    if cost > entry_limit then entry, cost = {entry[1]}, 96 + #entry[1] end
    total = total + cost
    if total > page_limit and #out > 0 then return {1, out} end
    out[#out + 1] = entry
  end
end
return {#page == tonumber(ARGV[2]) and 1 or 0, out})lua",
    {.calls = {"xrevrange"}}));
inline constexpr Script k_history_page_script = script(k_history_page_text);

} // namespace redlock::lock
