-- fixed.lua: count a hit of cost n in one fixed window, unless it would take
-- the window over its limit. A refused hit is not counted: the counter never
-- goes past the limit. The time is script_now's (clock.lua, prepended).
--
-- KEYS[1] the start of the windows' counters: KEYS[1] .. w counts the hits
--         of window number w, floor(now µs / period µs)
-- ARGV[1] limit, hits per window    ARGV[2] cost n (1..limit)
-- ARGV[3] ms to keep the counter after the window's first hit (its length)
-- ARGV[4] the period, µs
-- ARGV[5] now, µs, or "" for the Redis server's clock
--
-- Reply, the first element is the outcome:
--   {0, count, now}   allowed; hits counted in the window, these included;
--                     the time decided at, µs
--   {1, count, now}   refused; hits counted in the window (unchanged)
--   {8}               the counter is not a non-negative integer; nothing written

local limit, n, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
local now = script_now(ARGV[5])
-- Redis before 7 formats Lua numbers with 14 significant digits.
local key = KEYS[1] .. string.format('%d', math.floor(now / period))
local count = 0
local v = redis.call('GET', key)
if v then
  if not string.match(v, '^%d+$') then return {8} end
  count = tonumber(v)
end
if count + n > limit then return {1, count, now} end

count = redis.call('INCRBY', key, n)
if count == n then redis.call('PEXPIRE', key, ARGV[3]) end
return {0, count, now}
