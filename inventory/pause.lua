-- pause.lua: pause or resume a sale; a change is journaled, a no-op is not.
--
-- KEYS[1] sale hash    KEYS[2] events stream
-- ARGV[1] now, unix ms    ARGV[2] "1" to pause, "0" to resume
--
-- Reply: {0} done (or already so), {2} the sale is not in Redis: rebuild it, call again.

local paused = redis.call('HGET', KEYS[1], 'paused')
if not paused then return {2} end
if paused == ARGV[2] then return {0} end
local kind = 'resumed'
if ARGV[2] == '1' then kind = 'paused' end
-- The event is the first write: XADD is the one write whose key no check
-- above has read, so if it fails, nothing has been written.
redis.call('XADD', KEYS[2], '*', 'type', kind, 'at', ARGV[1])
redis.call('HSET', KEYS[1], 'paused', ARGV[2])
return {0}
