-- stage.lua: write one chunk of a sale being rebuilt into a staging hash that
-- only the rebuild's owner knows the name of; nothing live is touched.
--
-- KEYS[1] staging hash
-- ARGV[1] ttl, ms (the staging hash expires if the rebuild dies)
-- ARGV[2], ARGV[3], ...  field, value pairs
--
-- Reply: {0}

redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return {0}
