-- buy.lua: a batch of buys of one sale, run in order. Each buy is atomic on
-- its own: every line of it is bought or none is, and its order record and
-- order event are written with its deduction. A batch of one is a single buy;
-- a buy in a batch sees the buys before it (their stock, quota and orders).
--
-- KEYS[1] sale hash    KEYS[2] bought hash    KEYS[3] orders hash
-- KEYS[4] idem hash    KEYS[5] events stream
-- KEYS[6] the start of the buyers' throttle hashes: KEYS[6] .. w .. ':' .. n
--         maps a user to their rate-limit state (a GCRA TAT, see gcra_take,
--         prepended with script_now) for the states whose TAT passes
--         (expiry, in unix ms, see below) in [n*w, (n+1)*w), and expires
--         at (n+1)*w, when every state it holds has passed (by the server's
--         clock, which both TIME and key expiry read). w is the buy's
--         throttle window: a power of two ms no shorter than the longest a
--         state of its bucket can be needed (throttleWindow, in buy.go), so
--         on a clock that only moves forward a buyer's live state is in one
--         of the hashes n = now/w and now/w + 1. The script reads now/w + 2
--         too, so that after the clock steps back by up to a window (TIME
--         after a failover to a server whose clock is behind, an NTP step)
--         a state filed before the step is still found. Of the states
--         found, the later TAT is the buyer's (a buyer's TAT only ever moves
--         forward). A buy's state is looked up in its own throttle's
--         window's hashes only, so that its decision never depends on who
--         else is in the batch
-- KEYS[7] the start of the spent purchase tokens' keys: KEYS[7] .. token
--         exists once an accepted buy has spent the token
-- ARGV[1] now, unix µs, or "" to read the Redis server's clock (TIME), the
--         one clock every instance shares (a test may stand in for it)
-- ARGV[2] number of buys
-- ARGV[3] number of throttles t, then t throttles, each as rate, period µs,
--         capacity and window ms
-- then, for each buy:
--   user id, new order id, idempotency key ("" for none),
--   the lines as "A=1,B=2", its throttle (1..t, 0 for none), the purchase
--   token to spend ("" for none) and the ms to keep it spent, the number of
--   lines n, then n pairs: sku, qty
--
-- Each bought order's event is one stream entry of one field, "bought":
-- "<order id>|<order record>" (the record as in the orders hash, see
-- record.go; its time is the event's), decoded by ParseEvent (events.go).
--
-- Reply:
--   {2}                  the sale is not in Redis: rebuild it, call again;
--                        nothing ran
--   {0, b1, b2, ...}     bN is buy N's outcome, an array whose first element
--                        is its code:
--   {0, at, r1, r2, ...}      bought at time at (unix ms); rN is line N's
--                             remaining after it (-1 unlimited)
--   {1, order_id, record, r1, r2, ...}
--                             replay: the idempotency key (or the order id, on a
--                             retried call) names an order of this user with
--                             these very lines; rN is the remaining of that
--                             order's line N now; nothing changed
--   {3, status}               not selling: "upcoming", "paused" or "ended", or
--                             "fenced": the database sells the sale (degraded
--                             mode, see fence.lua)
--   {4, sku, ...}             skus the sale does not have
--   {5, limit, sku, ...}      skus the user would then hold more than the limit of
--   {6, sku, remaining, ...}  skus with fewer units left than asked for, each
--                             with what is left of it
--   {7}                       the order id is another user's order (make a new id)
--   {8, field}                a stored value is not what the engine wrote;
--                             this buy changed nothing, the others ran
--   {9, debt}                 the buyer's throttle refused the buy; debt in
--                             its units
--   {14, order_id}            the idempotency key names an order of this user
--                             with other lines; nothing changed
--   {15}                      the purchase token was spent by an earlier buy
--
-- A repeat (the same idempotency key, or the same order id resent after a
-- lost reply) is answered first, before any refusal: the throttle, the token,
-- the sale's window or pause, the limit and the stock all judged the first
-- attempt, and the caller must learn what it did. Then, in order: the
-- throttle (every buy it lets through counts against it), the token, the
-- sale's state, the skus, the limit, the stock.
--
-- The script reads everything the batch needs first (one HMGET per hash),
-- checks every value it reads (counters with int, int.lua, prepended) (a
-- corrupt one is code 8 for the buys that read it), then runs the buys
-- against those values, appending each bought order's event as it goes, and
-- writes the counters, records, throttles and spent tokens once at the end.
-- The first write is the first XADD, and no write after it can fail on a
-- value checked here: Redis does not roll back a script that fails half
-- way, and refuses a script's writes for lack of memory only before its
-- first.

-- The time (script_now, see ratelimit's clock.lua, prepended).
local now_us = script_now(ARGV[1])
local now_ms = math.floor(now_us / 1000)
-- Redis before 7 formats Lua numbers handed to redis.call with 14
-- significant digits: hand it times as exact strings.
local now = string.format('%d', now_ms)
local now_bar = '|' .. now .. '|'
local count = tonumber(ARGV[2])

-- Redis's Lua refuses to unpack more than a few thousand values at once.
local chunk = 1000
local function hmget(key, fields)
  if #fields == 0 then return {} end
  if #fields <= chunk then return redis.call('HMGET', key, unpack(fields)) end
  local out = {}
  for i = 1, #fields, chunk do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + chunk - 1, #fields)))
    for j = 1, #part do out[i + j - 1] = part[j] end
  end
  return out
end
local function mget(keys)
  if #keys == 0 then return {} end
  if #keys <= chunk then return redis.call('MGET', unpack(keys)) end
  local out = {}
  for i = 1, #keys, chunk do
    local part = redis.call('MGET', unpack(keys, i, math.min(i + chunk - 1, #keys)))
    for j = 1, #part do out[i + j - 1] = part[j] end
  end
  return out
end
local function hset(key, pairs_)
  if #pairs_ <= chunk then return redis.call('HSET', key, unpack(pairs_)) end
  for i = 1, #pairs_, chunk do
    redis.call('HSET', key, unpack(pairs_, i, math.min(i + chunk - 1, #pairs_)))
  end
end

-- num(s) is tonumber(s), parsed once per batch for each string: the
-- arguments repeat a few small numbers (quantities, counts) in every buy.
local nums = {}
local function num(s)
  local n = nums[s]
  if n == nil then
    n = tonumber(s)
    nums[s] = n
  end
  return n
end

-- Parse the buys into flat arrays (no table per buy) and collect every
-- field the batch reads. Buy b's lines are ARGV[at[b]], ARGV[at[b] + 1], ...
-- as sku, qty pairs; its bought fields are bought_fields[bf[b] + i] and
-- its quantities qtys[bf[b] + i].
local user, id, key, lines, nlines, at, bf = {}, {}, {}, {}, {}, {}, {}
local rate, period, capacity, window = {}, {}, {}, {} -- by throttle
local throttle, token, token_ttl = {}, {}, {} -- by buy
local skus, sku_seen = {}, {}
local bought_fields, qtys, idem_fields = {}, {}, {}
-- The throttles' windows, once each: windows[i] (ms, a string), and for
-- each its users, once each (win_users[i]), and their states (win_state[i],
-- by user). wi[t] is throttle t's window's place i.
local windows, window_at, win_users, win_state, wi = {}, {}, {}, {}, {}
local spent, token_keys = {}, {} -- tokens to spend, once each
local a = 4
for t = 1, tonumber(ARGV[3]) do
  rate[t], period[t], capacity[t], window[t] = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), ARGV[a + 3]
  local i = window_at[window[t]]
  if not i then
    i = #windows + 1
    windows[i], win_users[i], win_state[i] = window[t], {}, {}
    window_at[window[t]] = i
  end
  wi[t] = i
  a = a + 4
end
for b = 1, count do
  local u = ARGV[a]
  user[b], id[b], key[b], lines[b] = u, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  throttle[b], token[b], token_ttl[b] = num(ARGV[a + 4]), ARGV[a + 5], ARGV[a + 6]
  nlines[b] = num(ARGV[a + 7])
  if throttle[b] > 0 then
    local i = wi[throttle[b]]
    if win_state[i][u] == nil then
      win_state[i][u] = false
      win_users[i][#win_users[i] + 1] = u
    end
  end
  a = a + 8
  if token[b] ~= '' and spent[token[b]] == nil then
    spent[token[b]] = false
    token_keys[#token_keys + 1] = KEYS[7] .. token[b]
  end
  at[b], bf[b] = a, #bought_fields
  for i = 0, nlines[b] - 1 do
    local sku = ARGV[a + 2 * i]
    if not sku_seen[sku] then
      sku_seen[sku] = true
      skus[#skus + 1] = sku
    end
    bought_fields[#bought_fields + 1] = u .. '|' .. sku
    qtys[#bought_fields] = num(ARGV[a + 2 * i + 1])
  end
  if key[b] ~= '' then idem_fields[#idem_fields + 1] = u .. '|' .. key[b] end
  a = a + 2 * nlines[b]
end

-- The sale: its definition and every asked sku's remaining, in one read.
local fields = {'limit', 'start', 'end', 'paused', 'fenced'}
for i, sku in ipairs(skus) do fields[5 + i] = 'r:' .. sku end
local meta = hmget(KEYS[1], fields)
if not meta[1] then return {2} end

-- rem[sku]: remaining (-1 unlimited); false: no such sku; 'bad': corrupt,
-- and so is the sold counter of an unlimited sku that is not an integer.
local rem = {}
local function load_rem(sku, v)
  if not v then
    rem[sku] = false
  else
    rem[sku] = int(v) or 'bad'
  end
end
for i, sku in ipairs(skus) do load_rem(sku, meta[5 + i]) end
local unlimited = {}
for _, sku in ipairs(skus) do
  if rem[sku] == -1 then unlimited[#unlimited + 1] = 's:' .. sku end
end
if #unlimited > 0 then
  local v = hmget(KEYS[1], unlimited)
  for i, f in ipairs(unlimited) do
    if v[i] and not int(v[i]) then rem[string.sub(f, 3)] = 'bad' end
  end
end
local function remaining(sku) -- also for skus outside the batch (replays)
  if rem[sku] == nil then load_rem(sku, redis.call('HGET', KEYS[1], 'r:' .. sku)) end
  return rem[sku]
end

local held, orders, idem = {}, {}, {}
local v = hmget(KEYS[2], bought_fields)
-- held[f]: units held, or false when the stored count is corrupt
for i, f in ipairs(bought_fields) do
  local h = v[i]
  if h then held[f] = int(h) or false else held[f] = 0 end
end
v = hmget(KEYS[3], id)
for b = 1, count do orders[id[b]] = v[b] or false end
v = hmget(KEYS[4], idem_fields)
for i, f in ipairs(idem_fields) do idem[f] = v[i] or false end
-- win_state[i][user]: the buyer's stored TAT in window i's hashes, false
-- for none; of several, the latest (or one gcra_take does not parse, so
-- that it is found corrupt)
local function later(a, b)
  if not a then return b end
  local ua, ra = string.match(a, '^(%d+):(%d+)$')
  local ub, rb = string.match(b, '^(%d+):(%d+)$')
  if not ua then return a end
  if not ub then return b end
  ua, ra, ub, rb = tonumber(ua), tonumber(ra), tonumber(ub), tonumber(rb)
  if ub > ua or ub == ua and rb > ra then return b end
  return a
end
for i, w in ipairs(windows) do
  local n = math.floor(now_ms / tonumber(w))
  local users, state = win_users[i], win_state[i]
  for d = 0, 2 do
    v = hmget(KEYS[6] .. w .. ':' .. string.format('%d', n + d), users)
    for j, u in ipairs(users) do
      if v[j] then state[u] = later(state[u], v[j]) end
    end
  end
end
-- spent[token]: whether an accepted buy spent it
v = mget(token_keys)
for i, k in ipairs(token_keys) do spent[string.sub(k, #KEYS[7] + 1)] = v[i] ~= false end

local limit, starts, ends = int(meta[1]), int(meta[2]), int(meta[3])
local not_selling
if not (limit and starts and ends) then
  not_selling = {8, 'sale'}
elseif meta[5] then
  not_selling = {3, 'fenced'}
elseif ends > 0 and now_ms >= ends then
  not_selling = {3, 'ended'}
elseif meta[4] == '1' then
  not_selling = {3, 'paused'}
elseif starts > 0 and now_ms < starts then
  not_selling = {3, 'upcoming'}
end

-- parse(record): the user and lines of an order record as the engine
-- writes it ("<p|c>|<user>|<ms>|<lines>|<key>", lines "A=1,B=2"), or nil.
local function parse(record)
  local u, l = string.match(record, '^[pc]|([^|]*)|%d+|([^|]*)|')
  if not u or l == '' then return nil end
  for line in string.gmatch(l .. ',', '([^,]*),') do
    if not string.match(line, '^[^=]+=%d+$') then return nil end
  end
  return u, l
end

-- replay answers buy b's repeat with the order id names, after checking
-- its record: another user's order is code 7 for an order id (the id is
-- taken) and corrupt for an idempotency key (the key is the user's own);
-- other lines than the order's are code 14.
local function replay(id, record, b, by_key)
  if not record then return {8, 'orders:' .. id} end
  local u, l = parse(record)
  if not u or (by_key and u ~= user[b]) then return {8, 'orders:' .. id} end
  if u ~= user[b] then return {7} end
  if l ~= lines[b] then return {14, id} end
  local reply = {1, id, record}
  for sku in string.gmatch(l, '([^,=]+)=%d+') do
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
local new_orders, new_idem, new_spent = {}, {}, {}
local dirty_rem, dirty_held = {}, {}
-- dirty_throttle: the states to write, as window place, user, window
-- place, user, ...; throttle_ttl[i][user]: how long its state is needed
local dirty_throttle, throttle_ttl = {}, {}
for i = 1, #windows do throttle_ttl[i] = {} end
local sold = {} -- units of unlimited skus sold by this batch

-- buy_one runs buy b; the lists of unknown, over-limit and short skus are
-- built only for a refusal.
local function buy_one(b)
  local u, n, base = user[b], nlines[b], at[b]
  -- A repeat (same idempotency key, or a retried call with the same order
  -- id) returns the order it made, whatever the sale's state is now.
  if key[b] ~= '' then
    local prev = idem[u .. '|' .. key[b]]
    if prev then return replay(prev, record_of(prev), b, true) end
  end
  local existing = record_of(id[b])
  if existing then return replay(id[b], existing, b, false) end

  local t = throttle[b]
  if t > 0 then
    local i = wi[t]
    local ok, debt, state, ttl = gcra_take(win_state[i][u], now_us, rate[t], period[t], capacity[t], 1)
    if ok == nil then return {8, 'throttle:' .. u} end
    if not ok then return {9, debt} end
    win_state[i][u] = state
    if not throttle_ttl[i][u] then
      dirty_throttle[#dirty_throttle + 1] = i
      dirty_throttle[#dirty_throttle + 1] = u
    end
    throttle_ttl[i][u] = ttl
  end
  if token[b] ~= '' and spent[token[b]] then return {15} end
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
    local f, qty = bought_fields[bf[b] + i + 1], qtys[bf[b] + i + 1]
    local h = held[f]
    if not h then return {8, 'bought:' .. f} end
    if h + qty > limit then over = true end
    local r = rem[ARGV[base + 2 * i]]
    if r ~= -1 and r < qty then short = true end
  end
  if over then
    local out = {5, limit}
    for i = 0, n - 1 do
      if held[bought_fields[bf[b] + i + 1]] + qtys[bf[b] + i + 1] > limit then
        out[#out + 1] = ARGV[base + 2 * i]
      end
    end
    return out
  end
  if short then
    local out = {6}
    for i = 0, n - 1 do
      local sku, qty = ARGV[base + 2 * i], qtys[bf[b] + i + 1]
      local r = rem[sku]
      if r ~= -1 and r < qty then
        out[#out + 1] = sku
        out[#out + 1] = r
      end
    end
    return out
  end

  -- Every check passed: the event, then this buy's part of the writes.
  local record = 'p|' .. u .. now_bar .. lines[b] .. '|' .. key[b]
  redis.call('XADD', KEYS[5], '*', 'bought', id[b] .. '|' .. record)
  local reply = {0, now_ms}
  for i = 0, n - 1 do
    local sku, qty, f = ARGV[base + 2 * i], qtys[bf[b] + i + 1], bought_fields[bf[b] + i + 1]
    if rem[sku] == -1 then
      sold[sku] = (sold[sku] or 0) + qty
      reply[i + 3] = -1
    else
      rem[sku] = rem[sku] - qty
      reply[i + 3] = rem[sku]
    end
    dirty_rem[sku] = true
    if not dirty_held[f] then
      dirty_held[f] = true
      dirty_held[#dirty_held + 1] = f
    end
    held[f] = held[f] + qty
  end
  orders[id[b]] = record
  new_orders[#new_orders + 1] = id[b]
  new_orders[#new_orders + 1] = record
  if key[b] ~= '' then
    idem[u .. '|' .. key[b]] = id[b]
    new_idem[#new_idem + 1] = u .. '|' .. key[b]
    new_idem[#new_idem + 1] = id[b]
  end
  if token[b] ~= '' then
    spent[token[b]] = true
    new_spent[#new_spent + 1] = b
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
      redis.call('HINCRBY', KEYS[1], 's:' .. sku, string.format('%d', sold[sku]))
    else
      sale_writes[#sale_writes + 1] = 'r:' .. sku
      sale_writes[#sale_writes + 1] = string.format('%d', rem[sku])
    end
  end
end
if #sale_writes > 0 then hset(KEYS[1], sale_writes) end
-- (No table here is indexed by a count or a window's number: the embedded
-- server's Lua, gopher-lua, fills every array slot below an integer key
-- under 2^26, so such a table would take GBs.)
local held_writes = {}
for _, f in ipairs(dirty_held) do
  held_writes[#held_writes + 1] = f
  held_writes[#held_writes + 1] = string.format('%d', held[f])
end
if #held_writes > 0 then hset(KEYS[2], held_writes) end
if #new_orders > 0 then hset(KEYS[3], new_orders) end
if #new_idem > 0 then hset(KEYS[4], new_idem) end
-- A throttle's state is kept until its TAT has passed, in the hash of the
-- window its expiry falls in (see KEYS[6]); a spent token as long as it
-- could still be presented.
local tat_writes, tat_ttl, tats = {}, {}, {} -- by hash; tats[key]: its writes
for j = 1, #dirty_throttle, 2 do
  local i, u = dirty_throttle[j], dirty_throttle[j + 1]
  local w = tonumber(windows[i])
  local n = math.floor((now_ms + throttle_ttl[i][u]) / w)
  local hkey = KEYS[6] .. windows[i] .. ':' .. string.format('%d', n)
  local writes = tats[hkey]
  if not writes then
    writes = {}
    tats[hkey] = writes
    tat_writes[#tat_writes + 1] = writes
    tat_ttl[#tat_ttl + 1] = (n + 1) * w - now_ms + 1
    writes.key = hkey
  end
  writes[#writes + 1] = u
  writes[#writes + 1] = win_state[i][u]
end
for i, writes in ipairs(tat_writes) do
  hset(writes.key, writes)
  redis.call('PEXPIRE', writes.key, string.format('%d', tat_ttl[i]))
end
for _, b in ipairs(new_spent) do
  redis.call('SET', KEYS[7] .. token[b], user[b], 'PX', token_ttl[b])
end
return out
