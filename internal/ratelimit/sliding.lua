-- sliding.lua: log a hit of cost n in a sliding window, unless the window
-- already holds too many. A refused hit is not logged. The time is
-- script_now's (clock.lua, prepended).
--
-- KEYS[1] the log: a sorted set, one member per hit, scored by its time (µs)
-- ARGV[1] now, µs, or "" for the Redis server's clock
-- ARGV[2] the window, µs: hits at or before now - window have left it
-- ARGV[3] limit, hits per window    ARGV[4] cost n (1..limit)
-- ARGV[5] a prefix unique to this call: the hit's members are
--         ARGV[5] .. '.' .. i for i = 1..n, so no two hits ever share a
--         member, not even two in the same microsecond (a shared member
--         would be one entry, and the log would undercount)
-- ARGV[6] ms to keep the log after this hit (the window's length)
--
-- Reply, the first element is the outcome:
--   {0, count, now}              allowed; hits in the window, these
--                                included; the time decided at, µs
--   {1, count, free, last, now}  refused; hits in the window (unchanged);
--                                the time (µs) of the hit whose leaving makes
--                                room for this one, and of the newest hit

local limit, n = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = script_now(ARGV[1])
-- Redis before 7 formats Lua numbers with 14 significant digits.
local at = string.format('%d', now)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - tonumber(ARGV[2])))
local count = redis.call('ZCARD', KEYS[1])
if count + n > limit then
  -- The oldest count+n-limit hits must leave before n more fit.
  local k = count + n - limit
  local free = redis.call('ZRANGE', KEYS[1], k - 1, k - 1, 'WITHSCORES')
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  return {1, count, tonumber(free[2]), tonumber(last[2]), now}
end

local args = {}
for i = 1, n do
  args[#args + 1] = at
  args[#args + 1] = ARGV[5] .. '.' .. i
  if #args == 1000 or i == n then
    redis.call('ZADD', KEYS[1], unpack(args))
    args = {}
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {0, count + n, now}
