-- clock.lua: the time a script decides by, as a Lua function, prepended to
-- the source of every script that reads the time (ratelimit's fixed,
-- sliding and gcra, and the inventory's buy.lua).
--
-- script_now(arg) returns now in whole µs since 1970: arg if the caller
-- gave one (a test standing in for the clock), else the Redis server's
-- clock (TIME). Every instance of a service that shares a Redis node reads
-- the one clock, so instances whose own clocks drift apart still agree on
-- windows and buckets. Redis 7 replicates a script's effects, not the
-- script (Redis 5 and 6 do so by default), so a script may read TIME before
-- it writes.
local function script_now(arg)
  local now = tonumber(arg)
  if now then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
