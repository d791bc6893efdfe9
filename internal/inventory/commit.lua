-- commit.lua: make a staged rebuild of a sale live, in one step, only if the
-- sale is still missing and its stream has generated no event newer than the
-- snapshot. A rebuild that lost a race (its owner paused past the lock's
-- expiry, say) finds the sale live and discards its staging: a live counter
-- is never reset.
--
-- The stream's position is its last generated id (XINFO STREAM), not its
-- newest entry: the order consumer trims the entries it has stored and
-- acknowledged, so an event the snapshot missed (stored just after the
-- loader read the database) may be gone from the stream by now; its id is
-- still the last generated one. A missing stream has generated nothing we
-- can know of: position 0-0. (A stream deleted with the sale, by a flush,
-- loses its position; the ids a new stream generates follow the Redis
-- clock, so they come after the old ones unless that clock went back.)
--
-- KEYS[1] sale hash       KEYS[2] bought hash     KEYS[3] orders hash
-- KEYS[4] idem hash       KEYS[5] events stream   KEYS[6] lock
-- KEYS[7..10] staging hashes of sale, bought, orders, idem
-- KEYS[11] deadlines zset    KEYS[12] paid hash (the payment step, pay.go)
-- KEYS[13] staging hash of the deadlines (order id -> pay_by, unix ms),
--          made a zset at the commit    KEYS[14] staging hash of paid
-- KEYS[15] the mark archive.lua leaves for a while once it removed the sale
-- KEYS[16] staging hash of the spent tokens (token -> "<user>|<until, unix
--          ms>", spent.go)
-- KEYS[17] the start of the spent tokens' marks: KEYS[17] .. token (as
--          buy.lua's KEYS[7]), set to the user until the token's life is
--          over by the script's clock (none for a token whose life is
--          over already)
-- ARGV[1] owner token
-- ARGV[2] id of the last event the snapshot reflects: every event up to it
--         is in the snapshot ("" none, "+" do not check)
-- ARGV[3] the floor: the newest event id the system of record has seen
--         ("" none). The live sale's stream generates ids above it only:
--         a stream lost with Redis and made again on a clock behind the
--         lost ids would hand out ids the system of record already holds
--         (and skips as applied). The stream's last generated id is moved
--         up to the floor by adding an entry with the floor's id and
--         deleting it at once (XSETID does the same, but the embedded
--         server lacks it); the consumer group, if any, never sees it.
-- ARGV[4] how many spent tokens are staged in KEYS[16]
-- ARGV[5] now, unix µs, or "" to read the Redis server's clock (TIME), as
--         buy.lua, which spent the tokens, reads it (script_now, prepended)
--
-- Reply: {0} live now, {1} the sale was there already (staging discarded),
--        {12, id} the stream generated an event newer than the snapshot; id
--        is its last generated id (staging discarded: reload and try again),
--        {13} the staged sale (or its spent tokens) expired before the
--        commit (try again),
--        {18} the sale was archived (its keys removed for good) since the
--        snapshot was read: a snapshot read before that may predate its
--        end (staging discarded).

local function release()
  if redis.call('GET', KEYS[6]) == ARGV[1] then redis.call('DEL', KEYS[6]) end
end
local function discard()
  redis.call('DEL', KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[13], KEYS[14], KEYS[16])
  release()
end

-- newer and stream_last: settled.lua, prepended; script_now: clock.lua, prepended.

if redis.call('EXISTS', KEYS[1]) == 1 then
  discard()
  return {1}
end
if KEYS[15] and redis.call('EXISTS', KEYS[15]) == 1 then
  discard()
  return {18}
end
if ARGV[2] ~= '+' and redis.call('EXISTS', KEYS[5]) == 1 then
  local last = stream_last(KEYS[5])
  if newer(last, ARGV[2]) then
    discard()
    return {12, last}
  end
end
if redis.call('EXISTS', KEYS[7]) == 0 or ARGV[4] ~= '0' and redis.call('EXISTS', KEYS[16]) == 0 then
  discard()
  return {13}
end

-- The clock a spent token's life is counted by, read before the first write.
local now_ms = 0
if ARGV[4] ~= '0' then now_ms = math.floor(script_now(ARGV[5]) / 1000) end

-- The floor: the first write. Its id is above the stream's last, so the
-- XADD cannot fail on it.
if ARGV[3] ~= '' then
  local last = ''
  if redis.call('EXISTS', KEYS[5]) == 1 then
    local info = redis.call('XINFO', 'STREAM', KEYS[5])
    for i = 1, #info - 1, 2 do
      if info[i] == 'last-generated-id' then last = info[i + 1] end
    end
  end
  if newer(ARGV[3], last) then
    redis.call('XADD', KEYS[5], ARGV[3], 'floor', '1')
    redis.call('XDEL', KEYS[5], ARGV[3])
  end
end

-- Whatever is left of the lost sale is replaced by the snapshot.
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[11], KEYS[12])
for i = 1, 4 do
  if redis.call('EXISTS', KEYS[6 + i]) == 1 then
    redis.call('RENAME', KEYS[6 + i], KEYS[i])
    redis.call('PERSIST', KEYS[i])
  end
end
if redis.call('EXISTS', KEYS[14]) == 1 then
  redis.call('RENAME', KEYS[14], KEYS[12])
  redis.call('PERSIST', KEYS[12])
end
if redis.call('EXISTS', KEYS[13]) == 1 then
  local staged = redis.call('HGETALL', KEYS[13])
  local z = {}
  for i = 1, #staged, 2 do
    z[#z + 1] = staged[i + 1]
    z[#z + 1] = staged[i]
    if #z >= 1000 then
      redis.call('ZADD', KEYS[11], unpack(z))
      z = {}
    end
  end
  if #z > 0 then redis.call('ZADD', KEYS[11], unpack(z)) end
  redis.call('DEL', KEYS[13])
end
-- The marks of the tokens the sale's orders spent, for the rest of their
-- life: buy.lua refuses them again from the moment the sale is live.
if redis.call('EXISTS', KEYS[16]) == 1 then
  local staged = redis.call('HGETALL', KEYS[16])
  for i = 1, #staged, 2 do
    local user, untl = string.match(staged[i + 1], '^(.*)|(%d+)$')
    local left = untl and tonumber(untl) - now_ms
    if left and left > 0 then redis.call('SET', KEYS[17] .. staged[i], user, 'PX', string.format('%d', left)) end
  end
  redis.call('DEL', KEYS[16])
end
release()
return {0}
