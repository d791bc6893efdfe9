-- take.lua: take units from one segment of a segmented stock, if it has them.
--
-- KEYS[1]  the segment's remaining stock (a string holding an integer)
-- KEYS[2]  the segment's sold counter
-- ARGV[1]  units to take (>= 1)
--
-- Replies the segment's remaining stock after taking the units, or -1 when
-- it holds fewer than ARGV[1] units (or none): then nothing is written.
local n = tonumber(ARGV[1])
local left = tonumber(redis.call('GET', KEYS[1]) or '0')
if left < n then
  return -1
end
redis.call('INCRBY', KEYS[2], n)
return redis.call('DECRBY', KEYS[1], n)
