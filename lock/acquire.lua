-- acquire.lua: take a lock (SET NX PX) and issue its fencing token (INCR of
-- the lock's counter) in one atomic step, so no holder exists without a fence
-- and no fence is issued without a holder.
--
-- KEYS[1] lock key          KEYS[2] fence counter (a plain integer, no TTL)
-- ARGV[1] owner token       ARGV[2] TTL, ms (> 0)
--
-- Reply: {1, fence}   taken; fence = the counter after INCR (>= 1).
--        {1, fence}   also when KEYS[1] already holds ARGV[1]: a client retried
--                     a call whose reply it lost. The counter has not moved
--                     since (nobody else can take the lock while we hold it),
--                     so fence is its current value and nothing is written.
--        {0, pttl}    held by another owner; pttl = its remaining ms
--                     (-1: no expiry). Nothing changed.
--        {2}          the counter holds something other than an integer.
--                     Nothing changed.
-- A counter of the wrong type fails the GET with WRONGTYPE, before any write.

local counter = redis.call('GET', KEYS[2])
if counter and not string.match(counter, '^%d+$') then
  return {2}
end

local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  return {1, tonumber(counter or '0')}
end
if owner then
  return {0, redis.call('PTTL', KEYS[1])}
end

-- All checks done; the writes follow.
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, redis.call('INCR', KEYS[2])}
