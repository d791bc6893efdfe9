-- fence.lua: fences a sale off in Redis, or lifts the fence. While fenced,
-- buy.lua refuses every buy of the sale with {3, 'fenced'}: the database is
-- selling it (degraded mode), and what Redis holds of it is stale until it
-- has been repaired from the database. Nothing else about the sale changes.
--
-- KEYS[1] sale hash
-- ARGV[1] the fence: the degraded-mode epoch, or "" to lift it
-- ARGV[2] lifting only: "" lifts any fence; an epoch lifts only a fence
--         set for an earlier one (a stale fence), never a newer one
--
-- Reply: {1} done (or nothing to lift); {0} the sale is not in Redis
-- (nothing to fence: a missing sale is rebuilt from the database only once
-- it sells from Redis again); {5} a fence newer than ARGV[2] stays.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[1], 'fenced', ARGV[1])
  return {1}
end
if ARGV[2] ~= '' then
  local fence = tonumber(redis.call('HGET', KEYS[1], 'fenced'))
  if fence and fence >= tonumber(ARGV[2]) then return {5} end
end
redis.call('HDEL', KEYS[1], 'fenced')
return {1}
