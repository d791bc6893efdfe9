-- pause.lua: pause or resume a sale; a change is journaled, a no-op is not.
-- A call sent again after its reply was lost (the Redis client resends a
-- command whose connection broke) changes nothing the second time: a resume
-- made in between stays, as does a pause after a resume.
--
-- KEYS[1] sale hash    KEYS[2] events stream
-- KEYS[3] marker of this call: set when it changed the sale (kept a day)
-- ARGV[1] now, unix ms    ARGV[2] "1" to pause, "0" to resume
--
-- Reply: {0} done (or already so, or done by this call's first attempt),
-- {2} the sale is not in Redis: rebuild it, call again.

local paused = redis.call('HGET', KEYS[1], 'paused')
if not paused then return {2} end
-- A first attempt that changed the sale may have been undone by another
-- call since: this attempt must not undo that in turn.
if redis.call('EXISTS', KEYS[3]) == 1 then return {0} end
-- A no-op leaves no marker: a call that changed nothing may as well take
-- effect at its resend.
if paused == ARGV[2] then return {0} end
local kind = 'resumed'
if ARGV[2] == '1' then kind = 'paused' end
-- The event is the first write: XADD is the one write whose key no check
-- above has read, so if it fails, nothing has been written.
redis.call('XADD', KEYS[2], '*', 'type', kind, 'at', ARGV[1])
redis.call('HSET', KEYS[1], 'paused', ARGV[2])
redis.call('SET', KEYS[3], '1', 'EX', 86400)
return {0}
