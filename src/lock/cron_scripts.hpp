#pragma once
// The scripts of a `redlock cron` slot (lock/cron_slot.hpp). A job's slot record is a few
// fields of the name's record (lock/keys.hpp, KEYS[3] of the claim; lock/scripts.hpp has
// the record's other fields), on each server:
//   c    the latest slot decided here (ms since the Unix epoch): claimed to run, or recorded
//        missed. A max-register: a slot is claimed only where no later one (nor itself) is,
//        so two runs of one slot cannot both win a majority.
//   cs   that slot's state: running (claimed; PROGRAM may run), done (it ended), lost or
//        killed (its run lost its lease, or died, while PROGRAM ran), unstarted (PROGRAM
//        could not be started), missed (past its window)
//   ct, ch, cb, ce, cx
//        its run: the claimer's token, its host, when it started and ended, its exit
//        status (or what could not be started); the rest of the run is in its history entry
//   ck   the latest slot skipped because an earlier one still ran (overlap=skip)
//   cq   overlap=queue: the slot waiting for the running one to end
//   cn, cw, cz
//        the job's next fire after the slot, its schedule and zone, as the slot's claim saw
//        them (the exporter's)
// Text values are clipped to 63 bytes, so that the record stays a listpack (lock/scripts.hpp).
// Times are the server's (TIME). The record expires as every write of a run says
// (k_keep_record: the history's age); a slot's claim, skip or queueing pushes it back to
// the time its writer says (the later of the slot's catch-up window and its next fire, that
// one within the history's age, and a margin) if that is later, never sooner; and the cron
// run's other writes keep it that long too (its acquisition's keep_record "slot", its
// history entries' ARGV[9]: job/run.cpp), so that no slot can be claimed twice.

#include "lock/scripts.hpp"

namespace redlock::lock {

// The record's expiry moved to `at` (ms since the epoch) if that is later; `clip(text)`:
// a text value as the record keeps it.
inline constexpr auto k_cron_keep = fragment(R"lua(local function clip(text)
  return string.sub(text, 1, 63)
end
local function keep(key, at)
  local ttl = redis.call("pttl", key)
  if ttl < 0 or now + ttl < at then redis.call("pexpireat", key, at) end
end
)lua",
                                             {.calls = {"pttl", "pexpireat"}});

// The record's fields a decision needs, and the reply that says a slot is decided here
// already: {-1, c, ck, cs, ch, now}.
inline constexpr auto k_cron_read = fragment(
    R"lua(local slot = tonumber(ARGV[2])
local r = redis.call("hmget", RECORD, "c", "cs", "ct", "ck", "cq", "ch")
local last, state, claimer = tonumber(r[1]), r[2] or "", r[3] or ""
local skipped, pending = tonumber(r[4]), tonumber(r[5])
local function decided() return {-1, last or -1, skipped or -1, state, r[6] or "", now} end
local function dead(st) return st == "running" or st == "lost" or st == "killed" or st == "interrupted" end
)lua",
    {.calls = {"hmget"}});

// Claims slot ARGV[2] for the run that holds the lock here (KEYS[1] the lock or its permit,
// KEYS[2] its metadata, KEYS[3] the record, KEYS[4] the name's lock key; ARGV[1] our token,
// ARGV[3] the last instant a fresh claim may be made, ARGV[4] "1" for an at-least-once job,
// ARGV[5] the record's expiry, ARGV[6] the next fire, ARGV[7] the schedule, ARGV[8] its
// zone, ARGV[9] until when an at-least-once job's earlier slot whose run died goes first,
// ARGV[10] the run's host, ARGV[11] the tokens of this run's earlier claims of the slot whose
// answers it did not get, comma-separated: a claim that landed with one of them is this
// run's, which never started PROGRAM, and is taken over by the new token). The holder's
// metadata gets "cron_claimed": its run is under way (k_cron_yield_script). Every reply
// ends with this server's TIME (ms). Replies:
//   0                      the lock does not hold our token here
//   {3, ms}                the slot's instant is that far ahead on this server's clock
//   {1, last, skipped}     claimed (the record's slots before, -1 for none)
//   {2, last, skipped}     claimed again: an at-least-once slot whose run died or lost its
//                          lease (its token holds no permit here), or one never started
//   {-1, ...}              decided here already (k_cron_read)
//   {-4, last, skipped}    past its window: recorded missed here
//   {5}                    an at-least-once job's earlier slot whose run died (or whose
//                          lease ran out) is not run again yet: its waiting runs go first
inline constexpr auto k_cron_claim_text =
    compose(k_token_check, k_server_now, k_cron_keep, fragment(R"lua(local RECORD = KEYS[3]
)lua"),
            k_cron_read,
            fragment(R"lua(if now < slot then return {3, slot - now, -1, "", "", now} end
local code = 1
-- Whether the run that claimed the record's slot is gone: the lock (or a permit) is ours
-- here, and the claimer's token holds no permit whose lease is not over.
local function gone()
  if claimer == ARGV[1] then return false end
  if KEYS[4] == KEYS[1] then return true end
  local ends = tonumber(redis.pcall("zscore", KEYS[4], claimer))
  return not ends or ends <= now
end
if last and last > slot then return decided() end
if last == slot then
  if state == "running" and (claimer == ARGV[1] or
      (claimer ~= "" and string.find("," .. (ARGV[11] or "") .. ",", "," .. claimer .. ",", 1, true))) then
    redis.call("hset", RECORD, "ct", ARGV[1])
    redis.call("hset", KEYS[2], "cron_claimed", slot)
    return {1, -1, -1, "", "", now}
  end
  local again = state == "unstarted" or (ARGV[4] == "1" and dead(state) and gone())
  if not again then return decided() end
  code = 2
elseif skipped and skipped >= slot and pending ~= slot then
  return decided()
elseif ARGV[4] == "1" and last and dead(state) and now < tonumber(ARGV[9]) and gone() then
  return {5, last, -1, state, "", now}
elseif now > tonumber(ARGV[3]) then
  redis.call("hset", RECORD, "c", slot, "cs", "missed", "cn", ARGV[6], "cw", clip(ARGV[7]), "cz", clip(ARGV[8]))
  keep(RECORD, tonumber(ARGV[5]))
  return {-4, last or -1, skipped or -1, "", "", now}
end
redis.call("hset", RECORD, "c", slot, "cs", "running", "ct", ARGV[1], "ch", clip(ARGV[10] or ""), "cb", now, "ce", "", "cx", "", "cn", ARGV[6], "cw", clip(ARGV[7]), "cz", clip(ARGV[8]))
keep(RECORD, tonumber(ARGV[5]))
redis.call("hset", KEYS[2], "cron_claimed", slot)
return {code, last or -1, skipped or -1, "", "", now})lua",
                     {.calls = {"hset"}, .pcalls = {"zscore"}}));
inline constexpr Script k_cron_claim_script = script(k_cron_claim_text);

// What a run of slot ARGV[2] that found the lock held does (KEYS[1] the name's lock key,
// KEYS[2] its metadata, KEYS[3] the record, KEYS[4..] with a limit the permits' metadata;
// ARGV[1] the run's token (unused here, for symmetry), ARGV[3] "1" for an at-least-once job,
// ARGV[4] what to do on an overlap: "look", "skip" (recorded) or "queue" (one slot waits,
// the others are skipped), ARGV[5] the record's expiry). A cron run's metadata names the
// slot it is for ("cron_slot") and, once claimed, that its run is under way
// ("cron_claimed"); a holder that has not claimed is about to, or to find its slot decided
// and let go. Every reply ends with this server's TIME (ms), as k_cron_claim_script's.
// Replies:
//   {3, ms}      the slot's instant is that far ahead on this server's clock
//   {-1, ...}    decided already (k_cron_read), or a later slot's run holds the lock
//   {10}         free here (or a permit is): try again
//   {11}         claimed by a run that may die: an at-least-once job waits for the release
//   {12}         a holder has not claimed its slot yet: look again shortly
//   {13}         an earlier slot's run (or another client) holds it: an overlap
//   {14}         an overlap, recorded here as skipped
//   {15}         an overlap, queued here
inline constexpr auto k_cron_yield_text =
    compose(k_server_now, k_cron_keep, fragment(R"lua(local RECORD = KEYS[3]
)lua"),
            k_cron_read,
            fragment(R"lua(if now < slot then return {3, slot - now, -1, "", "", now} end
if last and last > slot then return decided() end
if last == slot then
  if ARGV[3] == "1" and dead(state) then return {11, -1, -1, "", "", now} end
  if state == "unstarted" then return {10, -1, -1, "", "", now} end
  return decided()
end
if skipped and skipped >= slot and pending ~= slot then return decided() end
local kind = redis.call("type", KEYS[1]).ok
local metas = {}
if kind == "string" then
  metas[1] = KEYS[2]
elseif kind == "zset" then
  if #redis.call("zrangebyscore", KEYS[1], "(" .. now, "+inf") < #KEYS - 3 then return {10, -1, -1, "", "", now} end
  for i = 4, #KEYS do metas[#metas + 1] = KEYS[i] end
else
  return {10, -1, -1, "", "", now}
end
for _, meta in ipairs(metas) do
  local m = redis.pcall("hmget", meta, "cron_slot", "cron_claimed")
  if type(m) == "table" and not m.err then
    local s, claimed = tonumber(m[1]), tonumber(m[2])
    if s == slot or (s and claimed ~= s) then return {12, -1, -1, "", "", now} end
    if s and s > slot then return decided() end
  end
end
if ARGV[4] == "queue" and (pending == slot or not pending or (last and pending <= last)) then
  redis.call("hset", RECORD, "cq", slot)
  keep(RECORD, tonumber(ARGV[5]))
  return {15, -1, -1, "", "", now}
end
if ARGV[4] ~= "look" then
  if not skipped or skipped < slot then redis.call("hset", RECORD, "ck", slot) end
  keep(RECORD, tonumber(ARGV[5]))
  return {14, -1, -1, "", "", now}
end
return {13, -1, -1, "", "", now})lua",
                     {.calls = {"type", "zrangebyscore", "hset"}, .pcalls = {"hmget"}}));
inline constexpr Script k_cron_yield_script = script(k_cron_yield_text);

// The end of slot ARGV[2]'s run, if the record still has it by our token (KEYS[1] the
// record; ARGV[1] our token, ARGV[3] the slot's state now: done, lost, killed or
// unstarted, ARGV[4] the exit status, or what could not be started). Returns 1 recorded,
// 0 not ours.
inline constexpr auto k_cron_finish_text = compose(
    fragment(R"lua(local r = redis.call("hmget", KEYS[1], "ct", "c")
if r[1] ~= ARGV[1] or tonumber(r[2]) ~= tonumber(ARGV[2]) then return 0 end
)lua",
             {.calls = {"hmget"}}),
    k_server_now,
    fragment(
        R"lua(redis.call("hset", KEYS[1], "cs", ARGV[3], "ce", now, "cx", string.sub(ARGV[4], 1, 63))
return 1)lua",
        {.calls = {"hset"}}));
inline constexpr Script k_cron_finish_script = script(k_cron_finish_text);

} // namespace redlock::lock
