#pragma once
// The Lua scripts redlock runs, with their SHA1 for EVALSHA. Keys go only as KEYS and values
// only as ARGV. KEYS[1] is the lock key, KEYS[2] its metadata hash {<key>}:meta, KEYS[3]
// its fence counter {<key>}:fence (same hash slot; the counter has no TTL and is never
// deleted, or fences could go backwards). tests/lock/scripts_test.cpp checks each SHA1 against the
// server's SCRIPT LOAD.

#include <string_view>

namespace redlock::lock {

struct Script {
    std::string_view source;
    std::string_view sha1;
};

// Round 1 of an acquisition over several servers. The fence counter is checked first
// (a counter that is not a number is an error, never read as 0), then SET NX PX; on
// success the metadata hash (ARGV[3..] field/value pairs) is replaced with the same TTL.
// Returns this server's counter + 1, the fence this server alone would give (the client
// takes the largest over a majority, lock/lock.hpp); when held by another owner,
// -2 - PTTL (-1: held with no expiry), which a waiter sleeps by (k_held_reply).
// An acquire script's "held" reply, -2 - PTTL: the lock's remaining ms (-1: no expiry).
[[nodiscard]] constexpr long long held_pttl(long long reply) {
    return -2 - reply;
}

inline constexpr Script k_acquire_script{
    R"lua(local fence = redis.call("get", KEYS[3])
fence = fence and tonumber(fence)
if fence == nil then return redis.error_reply("ERR fence counter " .. KEYS[3] .. " is not a number") end
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  redis.call("del", KEYS[2])
  if #ARGV > 2 then
    redis.call("hset", KEYS[2], unpack(ARGV, 3))
    redis.call("pexpire", KEYS[2], ARGV[2])
  end
  return (fence or 0) + 1
end
return -2 - redis.call("pttl", KEYS[1]))lua",
    "6cbd38bbf2edada1e0ec251531ddd41919c3ebc5"};

// The whole acquisition on a single server: as k_acquire_script, and on success the
// counter is incremented and the new fence, returned, is also recorded in the metadata.
// Held: -2 - PTTL, as k_acquire_script.
inline constexpr Script k_acquire_single_script{
    R"lua(local fence = redis.call("get", KEYS[3])
if fence and tonumber(fence) == nil then return redis.error_reply("ERR fence counter " .. KEYS[3] .. " is not a number") end
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  redis.call("del", KEYS[2])
  fence = redis.call("incr", KEYS[3])
  if #ARGV > 2 then
    redis.call("hset", KEYS[2], "fence", fence, unpack(ARGV, 3))
    redis.call("pexpire", KEYS[2], ARGV[2])
  end
  return fence
end
return -2 - redis.call("pttl", KEYS[1]))lua",
    "5db4c73687196c055e9511226fa3a61f46dbec59"};

// Round 2 over several servers (ARGV[1] token, ARGV[2] fence): while this server still
// holds our token, raise its counter to the fence, never lowering it, and record the fence
// in the metadata if there is any. Returns 1 when the counter now holds our fence, 0 when
// the token is gone or the counter is already higher.
inline constexpr Script k_fence_script{
    R"lua(if redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end
local fence = redis.call("get", KEYS[3])
if fence and tonumber(fence) == nil then return redis.error_reply("ERR fence counter " .. KEYS[3] .. " is not a number") end
if fence and tonumber(fence) > tonumber(ARGV[2]) then return 0 end
redis.call("set", KEYS[3], ARGV[2])
if redis.call("exists", KEYS[2]) == 1 then redis.call("hset", KEYS[2], "fence", ARGV[2]) end
return 1)lua",
    "9e425eaddbf7a8c22befb8c18fe62ffaca6f19bf"};

// Compare-and-pexpire (ARGV[1] token, ARGV[2] ttl ms), the metadata alongside (its ttl_ms
// follows, for `extend`). Never re-creates an expired lock. Returns 1 when renewed, 0 when
// the token is not ours.
inline constexpr Script k_renew_script{
    R"lua(if redis.call("get", KEYS[1]) == ARGV[1] then
  if redis.call("pexpire", KEYS[2], ARGV[2]) == 1 then
    redis.call("hset", KEYS[2], "ttl_ms", ARGV[2])
  end
  return redis.call("pexpire", KEYS[1], ARGV[2])
end
return 0)lua",
    "741595b782258b56b7bd6e1bbb589972fcf8b497"};

// Compare-and-delete of the lock and its metadata (ARGV[1] token). Then, if ARGV[2] names
// the release channel ({<key>}:released, in the key's hash slot), a notice there wakes the
// waiters. pcall: an ACL that allows no channels must not cost the release itself.
// Returns 1 when deleted, 0 when not ours.
inline constexpr Script k_release_script{
    R"lua(if redis.call("get", KEYS[1]) == ARGV[1] then
  redis.call("del", KEYS[2])
  local deleted = redis.call("del", KEYS[1])
  if ARGV[2] then redis.pcall("publish", ARGV[2], "released") end
  return deleted
end
return 0)lua",
    "728abbd05b5e6d98c3b697ea40963b6291e0e17a"};

// The token, remaining TTL (ms), metadata and fence counter of a lock; {nil, -2, {}, fence}
// when free (the counter outlives the lock: it has no TTL).
inline constexpr Script k_inspect_script{
    R"lua(local token = redis.call("get", KEYS[1])
local fence = redis.call("get", KEYS[3])
if not token then return {false, -2, {}, fence} end
return {token, redis.call("pttl", KEYS[1]), redis.call("hgetall", KEYS[2]), fence})lua",
    "bbd946d0acf8e7f34865dfc0964a3485339065f8"};

// release --force of a lock key that is not a string (a hash someone wrote there): deletes
// KEYS[1] only if GET still fails with WRONGTYPE, so that a lock taken meanwhile is never
// removed. Needs only the GET and DEL that release needs.
inline constexpr Script k_remove_wrong_type_script{
    R"lua(local value = redis.pcall("get", KEYS[1])
if type(value) == "table" and value.err and string.find(value.err, "WRONGTYPE", 1, true) then
  return redis.call("del", KEYS[1])
end
return 0)lua",
    "b0642323e7f7959470b62e32a0ac9185f9938634"};

} // namespace redlock::lock
