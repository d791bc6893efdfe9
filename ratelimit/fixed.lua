-- fixed.lua: count a hit of cost n in one fixed window, unless it would take
-- the window over its limit. A refused hit is not counted: the counter never
-- goes past the limit.
--
-- KEYS[1] the window's counter
-- ARGV[1] limit, hits per window    ARGV[2] cost n (1..limit)
-- ARGV[3] ms to keep the counter after the window's first hit (its length)
--
-- Reply, the first element is the outcome:
--   {0, count}   allowed; hits counted in the window, these included
--   {1, count}   refused; hits counted in the window (unchanged)
--   {8}          the counter is not a non-negative integer; nothing written

local limit, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local count = 0
local v = redis.call('GET', KEYS[1])
if v then
  if not string.match(v, '^%d+$') then return {8} end
  count = tonumber(v)
end
if count + n > limit then return {1, count} end

count = redis.call('INCRBY', KEYS[1], n)
if count == n then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return {0, count}
