-- unlock.lua: release a lock only if this owner still holds it
-- (compare-and-delete), so a late owner never frees someone else's lock.
--
-- KEYS[1] lock    ARGV[1] owner token
--
-- Reply: {0} released, {1} not held by this owner (nothing changed).

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return {0}
end
return {1}
