-- release.lua: release a lock only if we still hold it (compare-and-delete).
--
-- KEYS[1]  the lock
-- ARGV[1]  the owner token its holder set it to
--
-- Replies 1 if the lock held ARGV[1] and is now deleted, 0 if it holds
-- anything else or nothing (it expired, and maybe another owner took it):
-- then it is left alone.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
