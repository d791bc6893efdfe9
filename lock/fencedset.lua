-- fencedset.lua: write a protected value only if the writer's fence is not
-- older than any fence the resource has accepted, and remember the fence.
-- Check and write are one atomic step: a check followed by a separate write
-- would let a stale holder slip in between.
--
-- KEYS[1] guarded resource: hash {fence = highest fence accepted, value}
-- ARGV[1] fence (integer >= 1)
-- ARGV[2] value
--
-- Reply: {1, fence}     written; fence >= every fence accepted before
--                       (equal: the same holder writing again).
--        {0, highest}   refused: fence < highest. Nothing changed.
--
-- Fences are compared as Lua numbers (doubles): exact up to 2^53.
-- To guard a write done by another script, copy the check: read the
-- highest fence first, refuse before any write, store the new fence with the write.

local highest = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
local fence = tonumber(ARGV[1])
if fence < highest then
  return {0, highest}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return {1, fence}
