-- buy.lua: a batch of buys of one sale, run in order. Each buy is atomic on
-- its own: every line of it is bought or none is, and its order record and
-- order event are written with its deduction. A batch of one is a single buy;
-- a buy in a batch sees the buys before it (their stock, quota and orders).
--
-- KEYS[1] sale hash    KEYS[2] bought hash    KEYS[3] orders hash
-- KEYS[4] idem hash    KEYS[5] events stream
-- KEYS[6] the start of the buyers' throttle keys: KEYS[6] .. user holds a
--         buyer's rate-limit state (a GCRA TAT, see gcra_take, prepended)
-- ARGV[1] now, unix ms    ARGV[2] now, unix µs    ARGV[3] number of buys
-- then, for each buy:
--   user id, new order id, idempotency key ("" for none),
--   the lines as "A=1,B=2", the throttle as rate, period µs, capacity
--   (0, 0, 0 for none), the number of lines n, then n pairs: sku, qty
--
-- Reply:
--   {2}                  the sale is not in Redis: rebuild it, call again;
--                        nothing ran
--   {0, b1, b2, ...}     bN is buy N's outcome, an array whose first element
--                        is its code:
--   {0, r1, r2, ...}          bought; rN is line N's remaining after it (-1 unlimited)
--   {1, order_id, record, r1, r2, ...}
--                             replay: the idempotency key (or the order id, on a
--                             retried call) names an order of this user; rN is the
--                             remaining of that order's line N now; nothing changed
--   {3, status}               not selling: "upcoming", "paused" or "ended", or
--                             "fenced": the database sells the sale (degraded
--                             mode, see fence.lua)
--   {4, sku, ...}             skus the sale does not have
--   {5, limit, sku, ...}      skus the user would then hold more than the limit of
--   {6, sku, remaining, ...}  skus with fewer units left than asked for, each
--                             with what is left of it
--   {7}                       the order id is another user's order (make a new id)
--   {8, field}                a stored value is not what the engine wrote
--   {9, debt}                 the buyer's throttle refused the buy (checked
--                             first, before even a replay); debt in its units
--
-- The script reads everything the batch needs first (one HMGET per hash),
-- then runs the buys against those values, appending each bought order's
-- event as it goes, and writes the counters and records once at the end.
-- The first write is a throttle's SET or the first XADD, and no write after
-- it can fail on a value checked here: Redis does not roll back a script that fails half way,
-- and refuses a script's writes for lack of memory only before its first.

local now, now_us, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

-- Redis's Lua refuses to unpack more than a few thousand values at once.
local chunk = 1000
local function hmget(key, fields)
  local out = {}
  for i = 1, #fields, chunk do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + chunk - 1, #fields)))
    for j = 1, #part do out[i + j - 1] = part[j] end
  end
  return out
end
local function hset(key, pairs_)
  for i = 1, #pairs_, chunk do
    redis.call('HSET', key, unpack(pairs_, i, math.min(i + chunk - 1, #pairs_)))
  end
end

-- Parse the buys into flat arrays (no table per buy) and collect every
-- field the batch reads. Buy b's lines are ARGV[at[b]], ARGV[at[b] + 1], ...
-- as sku, qty pairs; its bought fields are bought_fields[bf[b] + i].
local user, id, key, lines, nlines, at, bf = {}, {}, {}, {}, {}, {}, {}
local rate, period, capacity = {}, {}, {}
local skus, sku_seen = {}, {}
local bought_fields, idem_fields = {}, {}
local throttled, throttle_keys = {}, {} -- users with a throttle, once each
local a = 4
for b = 1, count do
  user[b], id[b], key[b], lines[b] = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  rate[b], period[b], capacity[b] = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  nlines[b] = tonumber(ARGV[a + 7])
  a = a + 3
  if rate[b] > 0 and throttled[user[b]] == nil then
    throttled[user[b]] = false
    throttle_keys[#throttle_keys + 1] = KEYS[6] .. user[b]
  end
  at[b], bf[b] = a + 5, #bought_fields
  for i = 0, nlines[b] - 1 do
    local sku = ARGV[a + 5 + 2 * i]
    if not sku_seen[sku] then
      sku_seen[sku] = true
      skus[#skus + 1] = sku
    end
    bought_fields[#bought_fields + 1] = user[b] .. '|' .. sku
  end
  if key[b] ~= '' then idem_fields[#idem_fields + 1] = user[b] .. '|' .. key[b] end
  a = a + 5 + 2 * nlines[b]
end

-- The sale: its definition and every asked sku's remaining, in one read.
local fields = {'limit', 'start', 'end', 'paused', 'fenced'}
for i, sku in ipairs(skus) do fields[5 + i] = 'r:' .. sku end
local meta = hmget(KEYS[1], fields)
if not meta[1] then return {2} end

-- rem[sku]: remaining (-1 unlimited); false: no such sku; 'bad': corrupt.
local rem = {}
local function load_rem(sku, v)
  if not v then
    rem[sku] = false
  else
    rem[sku] = tonumber(v) or 'bad'
  end
end
for i, sku in ipairs(skus) do load_rem(sku, meta[5 + i]) end
local function remaining(sku) -- also for skus outside the batch (replays)
  if rem[sku] == nil then load_rem(sku, redis.call('HGET', KEYS[1], 'r:' .. sku)) end
  return rem[sku]
end

local held, orders, idem = {}, {}, {}
local v = hmget(KEYS[2], bought_fields)
for i, f in ipairs(bought_fields) do held[f] = v[i] or '0' end
v = hmget(KEYS[3], id)
for b = 1, count do orders[id[b]] = v[b] or false end
v = hmget(KEYS[4], idem_fields)
for i, f in ipairs(idem_fields) do idem[f] = v[i] or false end
-- throttled[user]: the buyer's stored TAT, false for none
for i = 1, #throttle_keys, chunk do
  local part = redis.call('MGET', unpack(throttle_keys, i, math.min(i + chunk - 1, #throttle_keys)))
  for j = 1, #part do
    throttled[string.sub(throttle_keys[i + j - 1], #KEYS[6] + 1)] = part[j] or false
  end
end

local limit, starts, ends = tonumber(meta[1]), tonumber(meta[2]), tonumber(meta[3])
local not_selling
if not (limit and starts and ends) then
  not_selling = {8, 'sale'}
elseif meta[5] then
  not_selling = {3, 'fenced'}
elseif ends > 0 and tonumber(now) >= ends then
  not_selling = {3, 'ended'}
elseif meta[4] == '1' then
  not_selling = {3, 'paused'}
elseif starts > 0 and tonumber(now) < starts then
  not_selling = {3, 'upcoming'}
end

local function replay(id, record)
  local reply = {1, id, record}
  for sku in string.gmatch(string.match(record, '^[^|]*|[^|]*|[^|]*|([^|]*)'), '([^,=]+)=%d+') do
    local r = remaining(sku)
    if type(r) ~= 'number' then return {8, 'r:' .. sku} end
    reply[#reply + 1] = r
  end
  return reply
end

local function record_of(id)
  local rec = orders[id]
  if rec == nil then
    rec = redis.call('HGET', KEYS[3], id) or false
    orders[id] = rec
  end
  return rec
end

-- Writes, gathered for the end; dirty lists each changed key once.
local new_orders, new_idem = {}, {}
local dirty_rem, dirty_held = {}, {}
local sold = {} -- units of unlimited skus sold by this batch

-- buy_one runs buy b; the lists of unknown, over-limit and short skus are
-- built only for a refusal.
local function buy_one(b)
  local u, n, base = user[b], nlines[b], at[b]
  if rate[b] > 0 then
    local ok, debt, state, ttl = gcra_take(throttled[u], now_us, rate[b], period[b], capacity[b], 1)
    if ok == nil then return {8, 'throttle:' .. u} end
    if not ok then return {9, debt} end
    throttled[u] = state
    redis.call('SET', KEYS[6] .. u, state, 'PX', ttl)
  end
  -- A repeat (same idempotency key, or a retried call with the same order
  -- id) returns the order it made, whatever the sale's state is now.
  if key[b] ~= '' then
    local prev = idem[u .. '|' .. key[b]]
    if prev then
      local record = record_of(prev)
      if not record then return {8, 'orders:' .. prev} end
      return replay(prev, record)
    end
  end
  local existing = record_of(id[b])
  if existing then
    if string.match(existing, '^[^|]*|([^|]*)|') ~= u then return {7} end
    return replay(id[b], existing)
  end
  if not_selling then return not_selling end

  local unknown, over, short = false, false, false
  for i = 0, n - 1 do
    local sku = ARGV[base + 2 * i]
    local r = rem[sku]
    if r == false then
      unknown = true
    elseif r == 'bad' then
      return {8, 'r:' .. sku}
    end
  end
  if unknown then
    local out = {4}
    for i = 0, n - 1 do
      if rem[ARGV[base + 2 * i]] == false then out[#out + 1] = ARGV[base + 2 * i] end
    end
    return out
  end
  for i = 0, n - 1 do
    local f, qty = bought_fields[bf[b] + i + 1], tonumber(ARGV[base + 2 * i + 1])
    local h = tonumber(held[f])
    if not h then return {8, 'bought:' .. f} end
    if h + qty > limit then over = true end
    local r = rem[ARGV[base + 2 * i]]
    if r ~= -1 and r < qty then short = true end
  end
  if over then
    local out = {5, limit}
    for i = 0, n - 1 do
      if tonumber(held[bought_fields[bf[b] + i + 1]]) + tonumber(ARGV[base + 2 * i + 1]) > limit then
        out[#out + 1] = ARGV[base + 2 * i]
      end
    end
    return out
  end
  if short then
    local out = {6}
    for i = 0, n - 1 do
      local sku, qty = ARGV[base + 2 * i], tonumber(ARGV[base + 2 * i + 1])
      local r = rem[sku]
      if r ~= -1 and r < qty then
        out[#out + 1] = sku
        out[#out + 1] = r
      end
    end
    return out
  end

  -- Every check passed: the event, then this buy's part of the writes.
  redis.call('XADD', KEYS[5], '*', 'type', 'bought', 'order', id[b], 'user', u,
    'items', lines[b], 'key', key[b], 'at', now)
  local reply = {0}
  for i = 0, n - 1 do
    local sku, qty, f = ARGV[base + 2 * i], tonumber(ARGV[base + 2 * i + 1]), bought_fields[bf[b] + i + 1]
    if rem[sku] == -1 then
      sold[sku] = (sold[sku] or 0) + qty
      reply[i + 2] = -1
    else
      rem[sku] = rem[sku] - qty
      reply[i + 2] = rem[sku]
    end
    dirty_rem[sku] = true
    if not dirty_held[f] then
      dirty_held[f] = true
      dirty_held[#dirty_held + 1] = f
    end
    held[f] = tonumber(held[f]) + qty
  end
  local record = 'p|' .. u .. '|' .. now .. '|' .. lines[b] .. '|' .. key[b]
  orders[id[b]] = record
  new_orders[#new_orders + 1] = id[b]
  new_orders[#new_orders + 1] = record
  if key[b] ~= '' then
    idem[u .. '|' .. key[b]] = id[b]
    new_idem[#new_idem + 1] = u .. '|' .. key[b]
    new_idem[#new_idem + 1] = id[b]
  end
  return reply
end

local out = {0}
for b = 1, count do out[b + 1] = buy_one(b) end

-- Redis before 7 formats Lua numbers handed to redis.call with 14
-- significant digits: format counters that may be larger exactly.
local sale_writes = {}
for _, sku in ipairs(skus) do
  if dirty_rem[sku] then
    if rem[sku] == -1 then
      redis.call('HINCRBY', KEYS[1], 's:' .. sku, sold[sku])
    else
      sale_writes[#sale_writes + 1] = 'r:' .. sku
      sale_writes[#sale_writes + 1] = string.format('%d', rem[sku])
    end
  end
end
if #sale_writes > 0 then hset(KEYS[1], sale_writes) end
local held_writes = {}
for _, f in ipairs(dirty_held) do
  held_writes[#held_writes + 1] = f
  held_writes[#held_writes + 1] = string.format('%d', held[f])
end
if #held_writes > 0 then hset(KEYS[2], held_writes) end
if #new_orders > 0 then hset(KEYS[3], new_orders) end
if #new_idem > 0 then hset(KEYS[4], new_idem) end
return out
