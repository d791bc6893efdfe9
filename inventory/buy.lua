-- buy.lua: one atomic purchase of one or more items of a sale. Every item is
-- bought or none is; the order record and the order event are written in the
-- same script as the deduction, so they exist together or not at all.
--
-- KEYS[1] sale hash    KEYS[2] bought hash    KEYS[3] orders hash
-- KEYS[4] idem hash    KEYS[5] events stream
-- ARGV[1] now, unix ms         ARGV[2] user id
-- ARGV[3] new order id         ARGV[4] idempotency key, "" for none
-- ARGV[5] the lines as "A=1,B=2"
-- ARGV[6], ARGV[7], ...        sku, qty of each line, in the same order
--
-- Reply, the first element is the outcome:
--   {0, r1, r2, ...}          bought; rN is line N's remaining after it (-1 unlimited)
--   {1, order_id, record, r1, r2, ...}
--                             replay: the idempotency key (or the order id, on a
--                             retried call) names an order of this user; rN is the
--                             remaining of that order's line N now; nothing changed
--   {2}                       the sale is not in Redis: rebuild it, call again
--   {3, status}               not selling: "upcoming", "paused" or "ended"
--   {4, sku, ...}             skus the sale does not have
--   {5, limit, sku, ...}      skus the user would then hold more than the limit of
--   {6, sku, ...}             skus with fewer units left than asked for
--   {7}                       the order id is another user's order (make a new id)
--   {8, field}                a stored value is not what the engine wrote
--
-- All checks come before the first write: Redis does not roll back a script
-- that fails half way, and no write below can fail on a value checked above.

local now, user, order_id, key, lines = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local n = (#ARGV - 5) / 2

local function remaining_of(record)
  local out = {}
  for sku in string.gmatch(string.match(record, '^[^|]*|[^|]*|[^|]*|([^|]*)'), '([^,=]+)=%d+') do
    out[#out + 1] = tonumber(redis.call('HGET', KEYS[1], 'r:' .. sku))
  end
  return out
end

local function replay(id, record)
  local reply = {1, id, record}
  for _, r in ipairs(remaining_of(record)) do reply[#reply + 1] = r end
  return reply
end

-- The sale: its definition and every asked line's remaining, in one read.
local fields = {'limit', 'start', 'end', 'paused'}
for i = 1, n do fields[4 + i] = 'r:' .. ARGV[4 + 2 * i] end
local meta = redis.call('HMGET', KEYS[1], unpack(fields))
if not meta[1] then return {2} end

-- A repeat (same idempotency key, or a retried call with the same order id)
-- returns the order it made, whatever the sale's state is now.
if key ~= '' then
  local id = redis.call('HGET', KEYS[4], user .. '|' .. key)
  if id then
    local record = redis.call('HGET', KEYS[3], id)
    if not record then return {8, 'orders:' .. id} end
    return replay(id, record)
  end
end
local existing = redis.call('HGET', KEYS[3], order_id)
if existing then
  if string.match(existing, '^[^|]*|([^|]*)|') ~= user then return {7} end
  return replay(order_id, existing)
end

local limit, starts, ends = tonumber(meta[1]), tonumber(meta[2]), tonumber(meta[3])
if not (limit and starts and ends) then return {8, 'sale'} end
if ends > 0 and now >= ends then return {3, 'ended'} end
if meta[4] == '1' then return {3, 'paused'} end
if starts > 0 and now < starts then return {3, 'upcoming'} end

local sku, qty, rem, held = {}, {}, {}, {}
local unknown = {}
for i = 1, n do
  sku[i], qty[i] = ARGV[4 + 2 * i], tonumber(ARGV[5 + 2 * i])
  if not meta[4 + i] then
    unknown[#unknown + 1] = sku[i]
  else
    rem[i] = tonumber(meta[4 + i])
    if not rem[i] then return {8, 'r:' .. sku[i]} end
  end
end
if #unknown > 0 then return {4, unpack(unknown)} end

local bought_fields = {}
for i = 1, n do bought_fields[i] = user .. '|' .. sku[i] end
local bought = redis.call('HMGET', KEYS[2], unpack(bought_fields))
local over = {}
for i = 1, n do
  held[i] = tonumber(bought[i] or '0')
  if not held[i] then return {8, 'bought:' .. bought_fields[i]} end
  if held[i] + qty[i] > limit then over[#over + 1] = sku[i] end
end
if #over > 0 then return {5, limit, unpack(over)} end

local short = {}
for i = 1, n do
  if rem[i] ~= -1 and rem[i] < qty[i] then short[#short + 1] = sku[i] end
end
if #short > 0 then return {6, unpack(short)} end

-- Every check passed: write.
-- The event is the first write: XADD is the one write whose key no check
-- above has read, so if it fails, nothing has been written.
redis.call('XADD', KEYS[5], '*', 'type', 'bought', 'order', order_id, 'user', user,
  'items', lines, 'key', key, 'at', ARGV[1])
local reply = {0}
for i = 1, n do
  if rem[i] == -1 then
    redis.call('HINCRBY', KEYS[1], 's:' .. sku[i], qty[i])
    reply[i + 1] = -1
  else
    reply[i + 1] = redis.call('HINCRBY', KEYS[1], 'r:' .. sku[i], -qty[i])
  end
  redis.call('HINCRBY', KEYS[2], bought_fields[i], qty[i])
end
redis.call('HSET', KEYS[3], order_id, 'p|' .. user .. '|' .. ARGV[1] .. '|' .. lines .. '|' .. key)
if key ~= '' then redis.call('HSET', KEYS[4], user .. '|' .. key, order_id) end
return reply
