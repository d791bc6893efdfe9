-- pause.lua: pause or resume a sale; a change is journaled, a no-op is not.
--
-- KEYS[1] sale hash    KEYS[2] events stream
-- ARGV[1] now, unix ms    ARGV[2] "1" to pause, "0" to resume
--
-- Reply: {0} done (or already so), {2} the sale is not in Redis: rebuild it, call again,
--        {8, "events"} the events key holds something else than a stream.

local paused = redis.call('HGET', KEYS[1], 'paused')
if not paused then return {2} end
if paused == ARGV[2] then return {0} end
-- XADD is the one write whose key no check above has read: make sure it
-- cannot fail after the other writes.
local events_type = redis.call('TYPE', KEYS[2])
events_type = events_type.ok or events_type
if events_type ~= 'stream' and events_type ~= 'none' then return {8, 'events'} end

redis.call('HSET', KEYS[1], 'paused', ARGV[2])
local kind = 'resumed'
if ARGV[2] == '1' then kind = 'paused' end
redis.call('XADD', KEYS[2], '*', 'type', kind, 'at', ARGV[1])
return {0}
