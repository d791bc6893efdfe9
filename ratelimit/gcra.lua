-- gcra.lua: the generic cell rate algorithm, a token bucket of capacity
-- burst+1 refilled at rate per period. A hit of cost n is allowed if the
-- bucket holds n tokens, and takes them; a refused hit takes nothing.
--
-- The state is the theoretical arrival time (TAT): when the bucket will be
-- full again. Times here are counted in units of 1/rate µs, in which one
-- token (the emission interval, period/rate µs) is exactly `period` units,
-- so no rounding ever builds up, whatever the rate. The TAT is stored exactly
-- as "<whole µs>:<rest in units>". The debt is TAT - now in units (0 if the
-- TAT has passed); a hit of n fits if debt + n*period <= capacity*period.
-- The caller keeps every number below 2^52, so doubles compute exactly.
--
-- KEYS[1] the TAT
-- ARGV[1] now, µs    ARGV[2] rate    ARGV[3] period, µs
-- ARGV[4] capacity (burst+1)    ARGV[5] cost n (1..capacity)
--
-- Reply, the first element is the outcome:
--   {0, debt}   allowed; the debt after this hit, in units
--   {1, debt}   refused; the debt now (unchanged), in units
--   {8}         the stored TAT is not what the limiter wrote; nothing written

local now, rate, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local cap, n = tonumber(ARGV[4]) * period, tonumber(ARGV[5])
local debt = 0
local v = redis.call('GET', KEYS[1])
if v then
  local us, rest = string.match(v, '^(%d+):(%d+)$')
  if not us then return {8} end
  us, rest = tonumber(us), tonumber(rest)
  if us >= now then debt = (us - now) * rate + rest end
end
local after = debt + n * period
if after > cap then return {1, debt} end

local rest = after % rate
local us = (after - rest) / rate
-- Kept until the TAT has passed; then no state is the same as this state.
redis.call('SET', KEYS[1], string.format('%d:%d', now + us, rest),
  'PX', string.format('%d', math.floor(us / 1000) + 1))
return {0, after}
