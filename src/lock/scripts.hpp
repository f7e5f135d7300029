#pragma once
// The Lua scripts redlock runs, with their SHA1 for EVALSHA. Keys go only as KEYS and values
// only as ARGV. KEYS[1] is the lock key, KEYS[2] its metadata hash {<key>}:meta (same hash
// slot). tests/lock/scripts_test.cpp checks each SHA1 against the server's SCRIPT LOAD.

#include <string_view>

namespace redlock::lock {

struct Script {
    std::string_view source;
    std::string_view sha1;
};

// SET NX PX; on success the metadata hash (ARGV[3..] field/value pairs) is replaced
// and given the same TTL. Returns 1 when acquired, 0 when held by another owner.
inline constexpr Script k_acquire_script{
    R"lua(if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  redis.call("del", KEYS[2])
  if #ARGV > 2 then
    redis.call("hset", KEYS[2], unpack(ARGV, 3))
    redis.call("pexpire", KEYS[2], ARGV[2])
  end
  return 1
end
return 0)lua",
    "36c34a2bd3f6546987cb0328c9ec8b325696f9c6"};

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

// Compare-and-delete of the lock and its metadata. Returns 1 when deleted, 0 when not ours.
inline constexpr Script k_release_script{
    R"lua(if redis.call("get", KEYS[1]) == ARGV[1] then
  redis.call("del", KEYS[2])
  return redis.call("del", KEYS[1])
end
return 0)lua",
    "72d6c24aa0ab33a1105cc8c6eac7eb286d7537a3"};

// The token, remaining TTL (ms) and metadata of a lock; {nil, -2, {}} when free.
inline constexpr Script k_inspect_script{
    R"lua(local token = redis.call("get", KEYS[1])
if not token then return {false, -2, {}} end
return {token, redis.call("pttl", KEYS[1]), redis.call("hgetall", KEYS[2])})lua",
    "7012dfa1948ae7716ac351862edc42f339c99e35"};

} // namespace redlock::lock
