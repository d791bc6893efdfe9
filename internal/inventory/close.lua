-- close.lua: end a sale now, by the Redis server's clock, and journal it:
-- from this call on every buy of it is refused as ended, on every instance,
-- exactly as at its own end. A sale that has ended already (closed before,
-- or past its end) is left as it is and the call answers with its window:
-- a close resent after a lost reply changes nothing the second time.
-- A sale closed before its start gets a start just below the end, so that
-- its window stays valid (end after start) wherever it is rebuilt.
--
-- script_now (internal/gcra/clock.lua) and int (int.lua) are prepended.
--
-- KEYS[1] sale hash    KEYS[2] events stream
-- ARGV[1] now, unix µs, or "" to read the Redis server's clock (TIME)
--
-- Reply: {0, start, end} the sale's window (unix ms), ended at end;
--        {2} the sale is not in Redis: rebuild it, call again;
--        {8, field} a stored value is not what the engine wrote;
--        {16} the sale is fenced off: the database sells it (degraded mode).

local v = redis.call('HMGET', KEYS[1], 'start', 'end', 'fenced')
if not v[1] and not v[2] and redis.call('EXISTS', KEYS[1]) == 0 then return {2} end
local start, stop = int(v[1]), int(v[2])
if not start then return {8, 'start'} end
if not stop then return {8, 'end'} end
if v[3] then return {16} end
local now = math.floor(script_now(ARGV[1]) / 1000)
if stop ~= 0 and stop <= now then return {0, start, stop} end
if start >= now then start = now - 1 end
-- The event is the first write: XADD is the one write whose key no check
-- above has read, so if it fails, nothing has been written.
redis.call('XADD', KEYS[2], '*', 'type', 'closed', 'at', tostring(now), 'start', tostring(start),
  'end', tostring(now))
redis.call('HSET', KEYS[1], 'start', tostring(start), 'end', tostring(now))
return {0, start, now}
