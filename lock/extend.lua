-- extend.lua: compare-and-extend. Push the lock's expiry to TTL from now, but
-- only if this owner still holds it; a lock that expired or passed to another
-- owner is never revived. With a fence floor, also raise the fence counter to
-- at least that floor (quorum mode: every node of the majority must remember
-- the fence it handed out, see "Quorum mode" in doc.go).
--
-- KEYS[1] lock key          KEYS[2] fence counter
-- ARGV[1] owner token       ARGV[2] TTL, ms (> 0)
-- ARGV[3] fence floor (0: leave the counter alone)
--
-- Reply: {1}   extended (and the counter is now >= the floor).
--        {0}   not held by this owner (expired, released, or taken over).
--              Nothing changed.
--        {2}   the counter holds something other than an integer. Nothing changed.

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0}
end

local floor = tonumber(ARGV[3])
local counter = 0
if floor > 0 then
  local c = redis.call('GET', KEYS[2])
  if c and not string.match(c, '^%d+$') then
    return {2}
  end
  counter = tonumber(c or '0')
end

-- All checks done; the writes follow.
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if floor > counter then
  redis.call('SET', KEYS[2], ARGV[3])
end
return {1}
