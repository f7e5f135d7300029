#pragma once
// The one script the fleet view reads a lock with (lock/script.hpp: its SHA1 and the
// commands it calls derived when compiling). Read-only, so that it goes as EVALSHA_RO (Redis
// 7) and a user whose ACL allows reads only (`%R~` keys, redlock(1) "EXPORTER") can run it.
// Everything the views show of a name, in one command per name and server, so that a
// thousand names are a pipeline of a thousand commands, not a round trip each:
//   KEYS: 1 the lock, 2 its metadata, 3 its fence counter, 4 the --once-per slot record,
//   5 the wait list, 6 the --fair queue, 7 the --limit N, 8 the counters ({<key>}:stats),
//   9 the history; ARGV[1] the release channel (whose listeners wait too), ARGV[2] the
//   longest string returned (a foreign value is clipped, not a reply past the reader's
//   bounds that would cost the whole pipeline).
// Returns {TYPE of the lock key, its token (false unless a string), PTTL, metadata, fence,
// --once-per record, waiters listed, --fair places, listeners of the release channel, the
// counters hash, the newest history entry's field/value pairs, the --limit N (false: none),
// the live permit holders' tokens}. Each hash (and the entry) comes as one string, its
// fields and values joined by NULs (a NUL inside one is a "?"): a handful of elements per
// name, not a hundred for the reader to allocate.

#include <array>
#include <string_view>

#include "lock/keys.hpp"
#include "lock/script.hpp"

namespace redlock::fleet {

inline constexpr auto k_read_text = lock::compose(lock::fragment(
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
    limit = redis.pcall("get", KEYS[7])
    if type(limit) ~= "string" then limit = false end
    local t = redis.call("time")
    permits = redis.call("zrangebyscore", KEYS[1], "(" .. (t[1] * 1000 + math.floor(t[2] / 1000)), "+inf", "LIMIT", 0, 1000)
  end
end
local fence = redis.pcall("get", KEYS[3])
if type(fence) ~= "string" then fence = false end
local numsub = redis.pcall("pubsub", "numsub", ARGV[1])
if type(numsub) == "table" and not numsub.err then numsub = count(numsub[2]) else numsub = 0 end
local latest = ""
local entries = redis.pcall("xrevrange", KEYS[9], "+", "-", "COUNT", 1)
if type(entries) == "table" and not entries.err and entries[1] then latest = pack(entries[1][2], 64) end
return {kind, token, pttl, meta, clip(fence), pack(redis.pcall("hgetall", KEYS[4]), 64), count(redis.pcall("zcard", KEYS[5])), count(redis.pcall("zcard", KEYS[6])), numsub, pack(redis.pcall("hgetall", KEYS[8]), 256), latest, clip(limit), permits})lua",
    {.calls = {"type", "get", "pttl", "time", "zrangebyscore"},
     .pcalls = {"hgetall", "get", "pubsub", "xrevrange", "zcard"}}));
inline constexpr lock::Script k_read_script = lock::script(k_read_text);

// What follows the script (or its SHA1) in a call of it on the keys `k`: the number of
// keys, KEYS 1-9 and ARGV 1-2 as above, `clip` the longest string returned.
inline std::array<std::string_view, 12> read_script_operands(const lock::Keys& k,
                                                             std::string_view clip) {
    return {"9",     k.lock,  k.meta,  k.fence,   k.slot,     k.waiters,
            k.queue, k.limit, k.stats, k.history, k.released, clip};
}

} // namespace redlock::fleet
