-- commit.lua: make a staged rebuild of a sale live, in one step, only if the
-- sale is still missing and no order event newer than the snapshot waits in
-- the stream. A rebuild that lost a race (its owner paused past the lock's
-- expiry, say) finds the sale live and discards its staging: a live counter
-- is never reset.
--
-- KEYS[1] sale hash       KEYS[2] bought hash     KEYS[3] orders hash
-- KEYS[4] idem hash       KEYS[5] events stream   KEYS[6] lock
-- KEYS[7..10] staging hashes of sale, bought, orders, idem
-- ARGV[1] owner token
-- ARGV[2] id of the last event the snapshot reflects ("" none, "+" do not check)
--
-- Reply: {0} live now, {1} the sale was there already (staging discarded),
--        {12, event id} an event newer than the snapshot is in the stream
--        (staging discarded: reload and try again),
--        {13} the staged sale expired before the commit (try again).

local function release()
  if redis.call('GET', KEYS[6]) == ARGV[1] then redis.call('DEL', KEYS[6]) end
end
local function discard()
  redis.call('DEL', KEYS[7], KEYS[8], KEYS[9], KEYS[10])
  release()
end

-- Stream ids are "<ms>-<seq>"; is a newer than b?
local function newer(a, b)
  if b == '' then return true end
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am > bm or (am == bm and as > bs)
end

if redis.call('EXISTS', KEYS[1]) == 1 then
  discard()
  return {1}
end
if ARGV[2] ~= '+' then
  local last = redis.call('XREVRANGE', KEYS[5], '+', '-', 'COUNT', 1)
  if #last > 0 and newer(last[1][1], ARGV[2]) then
    discard()
    return {12, last[1][1]}
  end
end
if redis.call('EXISTS', KEYS[7]) == 0 then
  discard()
  return {13}
end

-- Whatever is left of the lost sale is replaced by the snapshot.
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
for i = 1, 4 do
  if redis.call('EXISTS', KEYS[6 + i]) == 1 then
    redis.call('RENAME', KEYS[6 + i], KEYS[i])
    redis.call('PERSIST', KEYS[i])
  end
end
release()
return {0}
