-- release.lua: compare-and-delete. Delete the lock only if this owner still
-- holds it, so a holder whose lock expired never frees its successor's lock.
-- The fence counter is left alone: it must keep growing across holders.
--
-- KEYS[1] lock key
-- ARGV[1] owner token
--
-- Reply: {1}   released.
--        {0}   not held by this owner (expired or taken over). Nothing changed.

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0}
end
redis.call('DEL', KEYS[1])
return {1}
