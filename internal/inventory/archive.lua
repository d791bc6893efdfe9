-- archive.lua: remove a sale's keys from Redis once it can no longer
-- change: it has ended (by the Redis server's clock), no rebuild of it is
-- under way, no payment of it is awaiting, and the system of record holds
-- every event of its stream. Checked and done in one step: an event that
-- arrives after the caller's look (a late cancel) moves the stream, and the
-- keys stay until the caller looks again. The caller marks the sale
-- archived in the system of record first, so that no rebuild brings it
-- back once the keys are gone.
--
-- Big hashes go with UNLINK: Redis frees them in a background thread, so
-- the script holds the server for about as long as it takes to unlink a
-- handful of keys, whatever the sale's number of orders and buyers.
--
-- script_now (internal/gcra/clock.lua) and settled.lua are prepended.
--
-- KEYS[1] sale hash    KEYS[2] events stream    KEYS[3] rebuild lock
-- KEYS[4] payment deadlines (zset)
-- KEYS[5] the archived mark: set (for ARGV[3] ms) when the keys go, so
--         that commit.lua refuses a rebuild whose snapshot was read before
--         (a rebuilder that paused past its lock could otherwise bring back
--         a sale as it was before it ended)
-- KEYS[6..] every other key of the sale to remove with it
-- ARGV[1] now, unix µs, or "" to read the Redis server's clock (TIME)
-- ARGV[2] the stream's last generated id, as the caller found it settled
--         and the system of record confirmed it; "" only to look
-- ARGV[3] how long the archived mark stays, ms
--
-- Settled: as settled.lua says (every group delivered and acknowledged
-- every entry the stream holds; a missing stream is settled at "0-0").
--
-- Reply:
--   {0, id}     removed (with ARGV[2] ""; ready, nothing removed); id is
--               the stream's last generated id ("0-0": no stream)
--   {1}         the sale hash is gone already: whatever was left of the
--               sale (a stream emptied and made again by a consumer that
--               read it a last time) is removed
--   {17, why}   not now, nothing removed; why: "active" (not ended),
--               "rebuilding", "awaiting" (payments), "stray" (no sale hash
--               but events in its stream)
--   {12, id}    the stream generated an event after ARGV[2]
--   {14, group, pending, delivered, id}  events in flight (settled.lua)

-- parse, newer, fields, stream_last, stream_unsettled: settled.lua, prepended.

-- remove unlinks every key but the mark, and sets the mark.
local function remove()
  local doomed = {KEYS[1], KEYS[2], KEYS[3], KEYS[4]}
  for i = 6, #KEYS do doomed[#doomed + 1] = KEYS[i] end
  redis.call('UNLINK', unpack(doomed))
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[3])
end

if redis.call('EXISTS', KEYS[3]) == 1 then return {17, 'rebuilding'} end
if redis.call('EXISTS', KEYS[1]) == 0 then
  if redis.call('XLEN', KEYS[2]) > 0 then return {17, 'stray'} end
  if ARGV[2] ~= '' then remove() end
  return {1}
end
local stop = tonumber(redis.call('HGET', KEYS[1], 'end')) or 0
if stop == 0 or stop > math.floor(script_now(ARGV[1]) / 1000) then return {17, 'active'} end
if redis.call('EXISTS', KEYS[4]) == 1 and redis.call('ZCARD', KEYS[4]) > 0 then return {17, 'awaiting'} end

local last = stream_last(KEYS[2])
if ARGV[2] ~= '' and last ~= ARGV[2] then return {12, last} end
local unsettled = stream_unsettled(KEYS[2], last)
if unsettled then return unsettled end
if ARGV[2] == '' then return {0, last} end
remove()
return {0, last}
