#pragma once
// The one script the fleet view reads a lock with (lock/script.hpp: its SHA1 and the
// commands it calls derived when compiling). Read-only, so that it goes as EVALSHA_RO (Redis
// 7) and a user whose ACL allows reads only (`%R~` keys, redlock(1) "EXPORTER") can run it.
// Everything the views show of a name, in one command per name and server, so that a
// thousand names are a pipeline of a thousand commands, not a round trip each:
//   KEYS: 1 the lock, 2 its metadata, 3 the name's record (lock/scripts.hpp: its fence
//   counter, --once-per record, counters and newest history entry), 4 the wait list, 5 the
//   --fair queue, 6 the --limit N; ARGV[1] the release channel (whose listeners wait too),
//   ARGV[2] the longest string returned (a foreign value is clipped, not a reply past the
//   reader's bounds that would cost the whole pipeline).
// Returns {TYPE of the lock key, its token (false unless a string), PTTL, metadata, fence,
// --once-per record and a cron job's slot record (lock/cron_scripts.hpp), waiters listed, --fair
// places, listeners of the release channel, the counters, the newest history entry's field/value
// pairs, the --limit N (false: none), the live permit holders' tokens}. Each hash (and the entry)
// comes as one string, its fields and values joined by NULs (a NUL inside one is a "?"): a handful
// of elements per name, not a hundred for the reader to allocate. The counters are the record's
// with its newest entry added (k_run_counters), under the names fleet::parse_counters reads.

#include <array>
#include <string_view>

#include "lock/keys.hpp"
#include "lock/script.hpp"
#include "lock/scripts.hpp"

namespace redlock::fleet {

inline constexpr auto k_read_text =
    lock::compose(lock::k_blob, lock::k_entry_fields, lock::k_slot_fields, lock::k_run_counters,
                  lock::k_cron_fields,
                  lock::fragment(
                      R"lua(local cap = tonumber(ARGV[2])
local function clip(v)
  if type(v) == "string" and #v > cap then return string.sub(v, 1, cap) end
  return v
end
local function pack(reply, most)
  if type(reply) ~= "table" or reply.err then return "" end
  local out = {}
  for i = 1, math.min(#reply, most) do
    local v = clip(tostring(reply[i]))
    if string.find(v, "\0", 1, true) then v = string.gsub(v, "%z", "?") end
    out[i] = v
  end
  return table.concat(out, "\0")
end
local function count(reply)
  if type(reply) == "number" then return reply end
  return 0
end
local kind = redis.call("type", KEYS[1]).ok
local token, pttl, meta, limit, permits = false, -2, "", false, {}
if kind == "string" then
  token = clip(redis.call("get", KEYS[1]))
  pttl = redis.call("pttl", KEYS[1])
  meta = pack(redis.pcall("hgetall", KEYS[2]), 64)
elseif kind ~= "none" then
  pttl = redis.call("pttl", KEYS[1])
  if kind == "zset" then
    limit = redis.pcall("get", KEYS[6])
    if type(limit) ~= "string" then limit = false end
    local t = redis.call("time")
    permits = redis.call("zrangebyscore", KEYS[1], "(" .. (t[1] * 1000 + math.floor(t[2] / 1000)), "+inf", "LIMIT", 0, 1000)
  end
end
local numsub = redis.pcall("pubsub", "numsub", ARGV[1])
if type(numsub) == "table" and not numsub.err then numsub = count(numsub[2]) else numsub = 0 end
local names = {"f", "s", "s:2", "s:3", "s:4", "e", "e:2", "e:3", "e:4"}
for _, n in ipairs(counter_names) do names[#names + 1] = n end
for _, n in ipairs(cron_fields) do names[#names + 1] = n end
local record = redis.pcall("hmget", KEYS[3], unpack(names))
local fence, slot, counters, latest = false, "", "", ""
if record.err then
  fence = redis.pcall("get", KEYS[3])
  if type(fence) ~= "string" then fence = false end
else
  fence = record[1]
  local e = unblob({record[6], record[7], record[8], record[9]})
  e = e and fields_of(entry_fields, e)
  local s = slot_record({record[2], record[3], record[4], record[5]}, e)
  local kept = {}
  if s then
    s.token = s.run
    kept = pairs_of({"slot", "slot_ms", "token", "started_ms", "ended_ms", "status", "start_error", "host", "pid", "user", "command"}, s)
  end
  slot = pack(cron_pairs(record, 10 + #counter_names, kept, cap), 64)
  local c = {}
  for i, n in ipairs(counter_names) do c[n] = record[9 + i] or nil end
  if e then
    add_run(c, e)
    latest = pack(pairs_of(entry_fields, e), 64)
  end
  local long = {ds = "duration_ms", lr = "last_run_ms", ls = "last_success_ms", sl = "slot_ms", ["d+"] = "d:+Inf"}
  local out = {}
  for _, n in ipairs(counter_names) do
    if c[n] then
      out[#out + 1] = long[n] or (string.sub(n, 1, 2) == "r:" and "runs:" .. string.sub(n, 3)) or "d:" .. string.sub(n, 2)
      out[#out + 1] = string.format("%.0f", tonumber(c[n]) or 0)
    end
  end
  counters = pack(out, 256)
end
return {kind, token, pttl, meta, clip(fence), slot, count(redis.pcall("zcard", KEYS[4])), count(redis.pcall("zcard", KEYS[5])), numsub, counters, latest, clip(limit), permits})lua",
                      {.calls = {"type", "get", "pttl", "time", "zrangebyscore"},
                       .pcalls = {"hgetall", "get", "pubsub", "hmget", "zcard"}}));
inline constexpr lock::Script k_read_script = lock::script(k_read_text);

// What follows the script (or its SHA1) in a call of it on the keys `k`: the number of
// keys, KEYS 1-6 and ARGV 1-2 as above, `clip` the longest string returned.
inline std::array<std::string_view, 9> read_script_operands(const lock::Keys& k,
                                                            std::string_view clip) {
    return {"6", k.lock, k.meta, k.record, k.waiters, k.queue, k.limit, k.released, clip};
}

} // namespace redlock::fleet
