-- gcra_take.lua: the decision of the generic cell rate algorithm, as a Lua
-- function with no Redis calls of its own, so that ratelimit's gcra.lua and
-- the inventory's buy.lua (which checks a buyer's rate in the same call as
-- the buy) decide alike. Prepended to those scripts' source.
--
-- A token bucket of capacity tokens refilled at rate per period. The state
-- is the theoretical arrival time (TAT): when the bucket will be full again.
-- Times here are counted in units of 1/rate µs, in which one token (the
-- emission interval, period/rate µs) is exactly `period` units, so no
-- rounding ever builds up, whatever the rate. The TAT is stored exactly as
-- "<whole µs>:<rest in units>". The debt is TAT - now in units (0 if the TAT
-- has passed); a hit of n fits if debt + n*period <= capacity*period. The
-- caller keeps every number below 2^52, so doubles compute exactly.
--
-- gcra_take(stored, now, rate, period, capacity, n)
--   stored    the stored TAT, or false for none
--   now µs, rate, period µs, capacity (burst+1), n the hit's cost
-- returns
--   nil                          stored is not a TAT this function wrote
--                                (numbers of more than 16 digits or past
--                                2^53 included)
--   true, debt, state, ttl       allowed: the debt after the hit; store
--                                state, kept ttl ms (until the TAT passes;
--                                a number: format it to hand it to Redis)
--   false, debt                  refused: the debt now; store nothing
local function gcra_take(stored, now, rate, period, capacity, n)
  local debt = 0
  if stored then
    local us, rest = string.match(stored, '^(%d+):(%d+)$')
    -- at most 16 digits, below 2^53: what this function writes (past
    -- that doubles are inexact, the debt no integer reply, and the
    -- embedded server's Lua, gopher-lua, has no number for 20 digits)
    if not us or #us > 16 or #rest > 16 then return nil end
    us, rest = tonumber(us), tonumber(rest)
    if us >= 9007199254740992 or rest >= 9007199254740992 then return nil end
    if us >= now then debt = (us - now) * rate + rest end
  end
  local after = debt + n * period
  if after > capacity * period then return false, debt end
  local rest = after % rate
  local us = (after - rest) / rate
  -- Redis before 7 formats Lua numbers handed to redis.call with 14
  -- significant digits: format exactly.
  return true, after, string.format('%d:%d', now + us, rest), math.floor(us / 1000) + 1
end
