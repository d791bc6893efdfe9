-- fence.lua: fences a sale off in Redis, or lifts the fence. While fenced,
-- buy.lua refuses every buy of the sale with {3, 'fenced'}: the database is
-- selling it (degraded mode), and what Redis holds of it is stale until it
-- has been repaired from the database. Nothing else about the sale changes.
--
-- KEYS[1] sale hash
-- ARGV[1] the fence: the degraded-mode epoch, or "" to lift it
--
-- Reply: {1} done; {0} the sale is not in Redis (nothing to fence: a missing
-- sale is rebuilt from the database only once it sells from Redis again).
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
if ARGV[1] == '' then
  redis.call('HDEL', KEYS[1], 'fenced')
else
  redis.call('HSET', KEYS[1], 'fenced', ARGV[1])
end
return {1}
