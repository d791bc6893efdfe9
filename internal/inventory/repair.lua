-- repair.lua: set some values of a sale in Redis to what the system of record
-- says, only while no event of the sale is in flight and only if the sale's
-- stream has not moved since the caller found it settled (before it read the
-- system of record). Every script that changes a sale appends to its stream
-- in the same script, so an unmoved stream means Redis has not changed since:
-- a buy racing the repair either ran first (the stream moved: nothing is
-- written here) or runs after (and sees the repaired values).
--
-- The stream's position is its last generated id (XINFO STREAM), not its
-- newest entry: the order consumer trims acknowledged entries, so an entry
-- can come and go between the caller's look and this script.
--
-- KEYS[1] sale hash    KEYS[2] bought hash    KEYS[3] orders hash
-- KEYS[4] idem hash    KEYS[5] events stream
-- KEYS[6] deadlines zset    KEYS[7] paid hash (the payment step, pay.go)
-- KEYS[8] the start of the spent tokens' marks: KEYS[8] .. token (as
--         buy.lua's KEYS[7])
-- ARGV[1] the stream's last generated id the caller saw settled before it
--         read the system of record; "" to only look (no ops then)
-- ARGV[2] the floor: the newest event id the system of record holds ("" none).
--         If the stream's last generated id is behind it (a replica that was
--         behind, an AOF that lost its tail), it is raised to it as
--         commit.lua does, so that the stream never hands out an id the
--         system of record already holds (and would skip as applied).
-- ARGV[3] now, unix µs, or "" to read the Redis server's clock (TIME): the
--         clock a spent token's life is counted by, as buy.lua, which spent
--         it, reads it (script_now, prepended); only with ops
-- ARGV[4], ARGV[5], ...  ops, four values each: the hash (1 sale, 2 bought,
--         3 orders, 4 idem, 6 paid; 5 the deadlines zset, whose values are
--         scores; 7 a spent token's mark, the field its token, its value
--         the user, the value to set "<user>|<until, unix ms>", see
--         spent.go: set only, never removed, for the rest of its life),
--         the field, the value the caller read ("": no such field), the
--         value to set ("": remove the field)
--
-- Settled: as settled.lua says (every group delivered and acknowledged
-- every entry the stream holds; a missing stream is settled at "0-0").
--
-- Reply:
--   {0, id, n}          done: n fields written (0 when only looking); id is
--                       the stream's last generated id (before the floor)
--   {2}                 the sale is not in Redis (rebuilding it is not a repair)
--   {12, id}            the stream generated an event after ARGV[1]: the sale
--                       changed since; nothing written
--   {14, group, pending, delivered, id}
--                       events in flight: the group has pending entries, or
--                       was delivered only up to entry `delivered` of a
--                       stream at `id` (group "" : the stream has no group);
--                       nothing written
--   {15, field}         a value is not what the caller read (another repair
--                       came first); nothing written

-- parse, newer, fields, stream_last, stream_unsettled: settled.lua, prepended;
-- script_now: clock.lua, prepended.

if redis.call('EXISTS', KEYS[1]) == 0 then return {2} end

local last = stream_last(KEYS[5])
if ARGV[1] ~= '' and last ~= ARGV[1] then return {12, last} end
local unsettled = stream_unsettled(KEYS[5], last)
if unsettled then return unsettled end
if ARGV[1] == '' then return {0, last, 0} end

-- Every value as the caller read it? Checked in full before the first write.
local names = {'sale', 'bought', 'orders', 'idem', 'deadlines', 'paid', 'spent'}
for i = 4, #ARGV, 4 do
  local h = tonumber(ARGV[i])
  if not names[h] then return {15, 'op ' .. ARGV[i]} end
  local cur
  if h == 7 then
    if not string.match(ARGV[i + 3], '^.*|%d+$') then return {15, 'op ' .. ARGV[i]} end
    cur = redis.call('GET', KEYS[8] .. ARGV[i + 1]) or ''
  elseif h == 5 then
    cur = redis.call('ZSCORE', KEYS[5 + 1], ARGV[i + 1])
    if cur and tonumber(cur) == tonumber(ARGV[i + 2]) then cur = ARGV[i + 2] end
    cur = cur or ''
  else
    local key = KEYS[h]
    if h == 6 then key = KEYS[7] end -- the paid hash (KEYS[6] is the deadlines zset)
    cur = redis.call('HGET', key, ARGV[i + 1]) or ''
  end
  if cur ~= ARGV[i + 2] then return {15, names[h] .. ':' .. ARGV[i + 1]} end
end

-- The clock a spent token's life is counted by, read before the first write.
local now_ms = math.floor(script_now(ARGV[3]) / 1000)

-- The floor: the first write. Its id is above the stream's last, so the
-- XADD cannot fail on it; no group is ever delivered the entry.
if ARGV[2] ~= '' and newer(ARGV[2], last) then
  redis.call('XADD', KEYS[5], ARGV[2], 'floor', '1')
  redis.call('XDEL', KEYS[5], ARGV[2])
end

local n = 0
for i = 4, #ARGV, 4 do
  local h, field, value = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 3]
  if h == 7 then
    local user, untl = string.match(value, '^(.*)|(%d+)$')
    local left = tonumber(untl) - now_ms
    if left > 0 then redis.call('SET', KEYS[8] .. field, user, 'PX', string.format('%d', left)) end
  elseif h == 5 then -- the deadlines zset is KEYS[6]
    if value == '' then
      redis.call('ZREM', KEYS[6], field)
    else
      redis.call('ZADD', KEYS[6], value, field)
    end
  else
    local key = KEYS[h]
    if h == 6 then key = KEYS[7] end
    if value == '' then
      redis.call('HDEL', key, field)
    else
      redis.call('HSET', key, field, value)
    end
  end
  n = n + 1
end
return {0, last, n}
