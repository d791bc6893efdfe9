-- initlock.lua: take the lock that lets one instance rebuild a sale missing
-- from Redis, unless the sale is there already. The lock only spares the
-- system of record a stampede; correctness comes from commit.lua, which never
-- replaces a sale that exists.
--
-- KEYS[1] sale hash    KEYS[2] lock
-- ARGV[1] owner token  ARGV[2] lock ttl, ms
--
-- Reply: {0} taken, {1} the sale is there: nothing to rebuild,
--        {11} another owner holds the lock.

if redis.call('EXISTS', KEYS[1]) == 1 then return {1} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {0} end
return {11}
