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
--         state of its bucket can be needed (throttleWindow, in
--         throttle.go), so on a clock that only moves forward a buyer's
--         live state is in one of the hashes n = now/w and now/w + 1. The
--         script reads now/w + 2 too, so that after the clock steps back by
--         up to a window (TIME after a failover to a server whose clock is
--         behind, an NTP step) a state filed before the step is still
--         found; it reads the hashes now/w + 1 and + 2 only if one of them
--         exists (one EXISTS of both: usually neither does). Of the states
--         found, the later TAT is the buyer's (a buyer's TAT only ever moves
--         forward). A buy's state is looked up in its own throttle's
--         window's hashes only, so that its decision never depends on who
--         else is in the batch
-- KEYS[7] the start of the spent purchase tokens' keys: KEYS[7] .. token
--         exists once an accepted buy has spent the token
-- KEYS[8] the deadlines zset (order id -> pay_by, unix ms): a sale whose
--         hash has a payment timeout ("pay", ms) adds each order it accepts
--         with now + timeout (see pay.lua, expire.lua), and adds its units
--         to the sale's "a:<sku>" (units held by awaiting orders); a sale
--         without one touches neither
-- ARGV[1] now, unix µs, or "" to read the Redis server's clock (TIME), the
--         one clock every instance shares (a test may stand in for it)
-- ARGV[2] number of buys
-- ARGV[3] number of throttles t, then t throttles, each as rate, period µs,
--         capacity and window ms
-- then, for each buy:
--   user id, new order id, idempotency key ("" for none),
--   the lines as "A=1,B=2", its throttle (1..t, 0 for none), the purchase
--   token to spend ("" for none) and the ms to keep it spent, the number of
--   lines n, then n pairs: sku, qty (a positive integer in decimal, as
--   int takes it: a first holding is stored as this very argument)
--
-- Each bought order's event is one stream entry of one field, "bought":
-- "<order id>|<order record>" (the record as in the orders hash, see
-- record.go; its time is the event's), decoded by ParseEvent (events.go).
--
-- Reply, flat (one array for the call, not one per buy):
--   {2}                  the sale is not in Redis: rebuild it, call again;
--                        nothing ran
--   {0, k1, <buy 1's outcome>, k2, <buy 2's outcome>, ...}
--                        kN is the length of buy N's outcome, which is a
--                        list led by its code:
--   0, at, r1, r2, ...        bought at time at (unix ms); rN is line N's
--                             remaining after it (-1 unlimited)
--   1, order_id, record, r1, r2, ...
--                             replay: the idempotency key (or the order id, on a
--                             retried call) names an order of this user with
--                             these very lines; rN is the remaining of that
--                             order's line N now; nothing changed
--   3, status                 not selling: "upcoming", "paused" or "ended", or
--                             "fenced": the database sells the sale (degraded
--                             mode, see fence.lua)
--   4, sku, ...               skus the sale does not have
--   5, limit, sku, ...        skus the user would then hold more than the limit of
--   6, sku, remaining, ...    skus with fewer units left than asked for, each
--                             with what is left of it
--   7                         the order id is another user's order (make a new id)
--   8, field                  a stored value is not what the engine wrote;
--                             this buy changed nothing, the others ran
--   9, debt                   the buyer's throttle refused the buy; debt in
--                             its units
--   14, order_id              the idempotency key names an order of this user
--                             with other lines; nothing changed
--   15                        the purchase token was spent by an earlier buy
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

-- The time (script_now, see internal/gcra/clock.lua, prepended).
local now_us = script_now(ARGV[1])
local now_ms = math.floor(now_us / 1000)
local now_bar = '|' .. string.format('%d', now_ms) .. '|'

-- (Cost notes: in Redis's Lua every table, tonumber, string.format,
-- string.match and concatenation costs about as much as a few dozen plain
-- instructions, and a redis.call several times that: the script makes
-- few of each per buy, and fewer per call. See docs/performance.md.)

-- num(s) is tonumber(s) for the small numbers of the arguments, with the
-- common '0' and '1' taken without parsing.
local function num(s)
  if s == '1' then return 1 elseif s == '0' then return 0 end
  return tonumber(s)
end
local count, nth = num(ARGV[2]), num(ARGV[3])
-- exact(n): n as redis.call takes it exactly: a number below 10^14 as is
-- (Redis before 7 formats Lua numbers with 14 significant digits), a
-- larger one formatted.
local function exact(n)
  if n < 1e14 and n > -1e14 then return n end
  return string.format('%d', n)
end

-- Redis's Lua refuses to unpack more than a few thousand values at once.
-- read(cmd, key, list) is HMGET key list (MGET list with no key) and
-- hset(key, list) HSET key list, in parts of at most chunk values.
local chunk = 1000
local function read(cmd, key, list)
  local n = #list
  if n <= chunk then
    if key then return redis.call(cmd, key, unpack(list)) end
    return redis.call(cmd, unpack(list))
  end
  local out = {}
  for i = 1, n, chunk do
    local part
    if key then
      part = redis.call(cmd, key, unpack(list, i, math.min(i + chunk - 1, n)))
    else
      part = redis.call(cmd, unpack(list, i, math.min(i + chunk - 1, n)))
    end
    for j = 1, #part do out[i + j - 1] = part[j] end
  end
  return out
end
local function hset(key, list)
  if #list <= chunk then return redis.call('HSET', key, unpack(list)) end
  for i = 1, #list, chunk do
    redis.call('HSET', key, unpack(list, i, math.min(i + chunk - 1, #list)))
  end
end

-- The throttles, parsed once: throttle t's rate, period and capacity are
-- tp[3t-2], tp[3t-1], tp[3t], its window's place wplace[t]. The windows,
-- once each: windows[i] (ms), its users once each (wusers[i]) and their
-- states (wstate[i], by user, false for none).
local tp, wplace, windows, wusers, wstate
if nth > 0 then
  tp, wplace, windows, wusers, wstate = {}, {}, {}, {}, {}
  for t = 1, nth do
    tp[3 * t - 2], tp[3 * t - 1], tp[3 * t] = tonumber(ARGV[4 * t]), tonumber(ARGV[4 * t + 1]), tonumber(ARGV[4 * t + 2])
    local w, i = tonumber(ARGV[4 * t + 3]), nil
    for j = 1, #windows do
      if windows[j] == w then i = j end
    end
    if not i then
      i = #windows + 1
      windows[i], wusers[i], wstate[i] = w, {}, {}
    end
    wplace[t] = i
  end
end

-- Parse the buys: no table per buy. Buy b's arguments start at ARGV[at[b]]
-- (user, order id, key, lines, throttle, token, token ttl, n, then n sku,
-- qty pairs); its bought fields are bfields[bf[b] + 1 ..]. rem has every
-- asked sku (true until the sale is read), skus lists them once each and
-- rfields the sale's fields to read; ifields the idempotency fields and
-- tkeys the token keys, if any.
local at, bf, ids, bfields = {}, {}, {}, {}
local rem, skus = {}, {}
local rfields = {'limit', 'start', 'end', 'paused', 'fenced', 'pay'}
local ifields, tkeys, spent
local a = 4 + 4 * nth
for b = 1, count do
  local u, n = ARGV[a], num(ARGV[a + 7])
  at[b], bf[b], ids[b] = a, #bfields, ARGV[a + 1]
  if ARGV[a + 2] ~= '' then
    ifields = ifields or {}
    ifields[#ifields + 1] = u .. '|' .. ARGV[a + 2]
  end
  if ARGV[a + 4] ~= '0' then
    local i = wplace[num(ARGV[a + 4])]
    if wstate[i][u] == nil then
      wstate[i][u] = false
      wusers[i][#wusers[i] + 1] = u
    end
  end
  local tok = ARGV[a + 5]
  if tok ~= '' then
    if not spent then spent, tkeys = {}, {} end
    if spent[tok] == nil then
      spent[tok] = false
      tkeys[#tkeys + 1] = KEYS[7] .. tok
    end
  end
  for i = a + 8, a + 6 + 2 * n, 2 do
    local sku = ARGV[i]
    if not rem[sku] then
      rem[sku] = true
      skus[#skus + 1] = sku
      rfields[#rfields + 1] = 'r:' .. sku
    end
    bfields[#bfields + 1] = u .. '|' .. sku
  end
  a = a + 8 + 2 * n
end

-- The sale: its definition and every asked sku's remaining, in one read.
-- rem[sku]: remaining (-1 unlimited); false: no such sku; 'bad': corrupt,
-- and so is the sold counter of an unlimited sku that is not an integer.
local meta = read('HMGET', KEYS[1], rfields)
if not meta[1] then return {2} end
local unlimited
for i, sku in ipairs(skus) do
  local v = meta[6 + i]
  if v then
    v = int(v) or 'bad'
    if v == -1 then
      unlimited = unlimited or {}
      unlimited[#unlimited + 1] = 's:' .. sku
    end
  end
  rem[sku] = v or false
end
if unlimited then
  local v = read('HMGET', KEYS[1], unlimited)
  for i, f in ipairs(unlimited) do
    if v[i] and not int(v[i]) then rem[string.sub(f, 3)] = 'bad' end
  end
end

-- held[f]: units held, or false when the stored count is corrupt (not an
-- integer, or negative: one would let the buyer past the limit).
local held = {}
local v = read('HMGET', KEYS[2], bfields)
for i, f in ipairs(bfields) do
  local h = v[i]
  if h then
    h = int(h)
    held[f] = h and h >= 0 and h or false
  else
    held[f] = 0
  end
end
-- orders[b]: the record stored under buy b's order id, or false.
local orders = read('HMGET', KEYS[3], ids)
-- idem[f]: the order id an idempotency field names, or false.
local idem
if ifields then
  idem = {}
  v = read('HMGET', KEYS[4], ifields)
  for i, f in ipairs(ifields) do idem[f] = v[i] or false end
end
-- wstate[i][user]: the buyer's stored TAT in window i's hashes, false for
-- none; of several, the latest (or one gcra_take does not parse, so that
-- it is found corrupt). Window i's hashes read are wkey[3i-2] (the window
-- now falls in, number wn[i]), wkey[3i-1] and wkey[3i].
local wn, wkey
if windows then
  wn, wkey = {}, {}
  -- (A state of more than 16 digits is one gcra_take finds corrupt, and
  -- has no number in gopher-lua: it is the one returned, unparsed.)
  local function later(a, b)
    if not a then return b end
    local ua, ra = string.match(a, '^(%d+):(%d+)$')
    local ub, rb = string.match(b, '^(%d+):(%d+)$')
    if not ua or #ua > 16 or #ra > 16 then return a end
    if not ub or #ub > 16 or #rb > 16 then return b end
    ua, ra, ub, rb = tonumber(ua), tonumber(ra), tonumber(ub), tonumber(rb)
    if ub > ua or ub == ua and rb > ra then return b end
    return a
  end
  for i, w in ipairs(windows) do
    local n = math.floor(now_ms / w)
    local users, state, base = wusers[i], wstate[i], KEYS[6] .. w .. ':'
    wn[i] = n
    for d = 0, 2 do wkey[3 * i - 2 + d] = base .. string.format('%d', n + d) end
    if #users > 0 then
      -- The next two windows' hashes seldom exist: one EXISTS of both
      -- costs less than reading them for every buyer.
      local last = 2
      if redis.call('EXISTS', wkey[3 * i - 1], wkey[3 * i]) == 0 then last = 0 end
      for d = 0, last do
        v = read('HMGET', wkey[3 * i - 2 + d], users)
        for j = 1, #users do
          if v[j] then state[users[j]] = later(state[users[j]], v[j]) end
        end
      end
    end
  end
end
-- spent[token]: whether an accepted buy spent it.
if tkeys then
  v = read('MGET', nil, tkeys)
  for i, k in ipairs(tkeys) do spent[string.sub(k, #KEYS[7] + 1)] = v[i] ~= false end
end

local limit, starts, ends = int(meta[1]), int(meta[2]), int(meta[3])
-- pay: the payment timeout (ms), false for none; deadlines: the
-- deadline, order id pairs to add
local pay, deadlines = meta[6] and int(meta[6]), nil
if pay == 0 then pay = false end
-- bad_a: an asked sku's awaiting count ("a:<sku>") that HINCRBY would fail
-- on, read (a sale with a payment step only) before the first write
local bad_a
if pay then
  local af = {}
  for i, sku in ipairs(skus) do af[i] = 'a:' .. sku end
  v = read('HMGET', KEYS[1], af)
  for i = 1, #af do
    if v[i] and not int(v[i]) then bad_a = af[i] end
  end
end
local not_selling
if not (limit and starts and ends) or pay == nil or pay and pay < 0 then
  not_selling = 'sale'
elseif meta[5] then
  not_selling = 'fenced'
elseif ends > 0 and now_ms >= ends then
  not_selling = 'ended'
elseif meta[4] == '1' then
  not_selling = 'paused'
elseif starts > 0 and now_ms < starts then
  not_selling = 'upcoming'
end

-- The reply, flat: each buy's outcome (see above) after its length; o is
-- the last place used.
local out, o = {0}, 1
local function put(code, x, y) -- a reply of a code and up to two values
  local k = 1
  if x ~= nil then k = 2 end
  if y ~= nil then k = 3 end
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = k, code, x, y
  o = o + 1 + k
end
-- (Tables indexed by a count or a window's number would be slow: the
-- embedded server's Lua, gopher-lua, fills every array slot below an
-- integer key under 2^26. None here is.)

-- Writes, gathered for the end: field, value pairs by hash (a field
-- written twice takes its last value); made[id]: the records this batch
-- made (a later buy of the batch may repeat one); sold[sku]: units this
-- batch sold of a sku; tw[j]: the throttle states for hash wkey[j].
local new_orders, new_held, sold = {}, {}, {}
local made, new_idem, new_spent, tw
if count > 1 then made = {} end

-- replay answers buy b's repeat with the order id names, after checking
-- its record: another user's order is code 7 for an order id (the id is
-- taken) and corrupt for an idempotency key (the key is the user's own);
-- other lines than the order's are code 14. An order record as the engine
-- writes it is "<p|c>|<user>|<ms>|<lines>|<key>", lines "A=1,B=2".
local function replay(id, record, b, by_key)
  local u, l
  if record then
    u, l = string.match(record, '^[pc]|([^|]*)|%d+|([^|]*)|')
    if l == '' then u = nil end
    if u then
      for line in string.gmatch(l .. ',', '([^,]*),') do
        if not string.match(line, '^[^=]+=%d+$') then u = nil end
      end
    end
  end
  local user = ARGV[at[b]]
  if not u or (by_key and u ~= user) then return put(8, 'orders:' .. id) end
  if u ~= user then return put(7) end
  if l ~= ARGV[at[b] + 3] then return put(14, id) end
  -- the remaining of skus outside the batch too
  for sku in string.gmatch(l, '([^,=]+)=%d+') do
    local r = rem[sku]
    if r == nil then
      r = redis.call('HGET', KEYS[1], 'r:' .. sku)
      r = r and (int(r) or 'bad') or false
      rem[sku] = r
    end
    if type(r) ~= 'number' then return put(8, 'r:' .. sku) end
  end
  local start = o
  out[o + 2], out[o + 3], out[o + 4] = 1, id, record
  o = o + 4
  for sku in string.gmatch(l, '([^,=]+)=%d+') do
    o = o + 1
    out[o] = rem[sku]
  end
  out[start + 1] = o - start - 1
end

-- fresh[t]: gcra_take's answer for a buyer of throttle t with no state,
-- and the place of the hash that state goes in (see buy_one)
local fresh = {}

local function buy_one(b)
  local a = at[b]
  local u, id, key = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  -- A repeat (same idempotency key, or a retried call with the same order
  -- id) returns the order it made, whatever the sale's state is now.
  if key ~= '' then
    local prev = idem[u .. '|' .. key]
    if prev then
      local rec = made and made[prev]
      if not rec then rec = redis.call('HGET', KEYS[3], prev) end
      return replay(prev, rec, b, true)
    end
  end
  local existing = made and made[id] or orders[b]
  if existing then return replay(id, existing, b, false) end

  if ARGV[a + 4] ~= '0' then
    local t = num(ARGV[a + 4])
    local i = wplace[t]
    -- ok, debt, state: gcra_take's answer; j: the place (in wkey) of the
    -- hash the state is kept in until its TAT passes: the hash of the
    -- window that falls in, now's or the next (ttl is shorter than a
    -- window).
    local ok, debt, state, j
    local stored = wstate[i][u]
    if stored then
      local ttl
      ok, debt, state, ttl = gcra_take(stored, now_us, tp[3 * t - 2], tp[3 * t - 1], tp[3 * t], 1)
      if ok then j = 3 * i - 2 + math.floor((now_ms + ttl) / windows[i]) - wn[i] end
    else
      -- A buyer with no state (the common case: a buyer's first buy in a
      -- while) gets the one answer gcra_take gives every such buyer of
      -- throttle t at now: taken once per call (fresh[t]), not per buy.
      local f = fresh[t]
      if not f then
        local ttl
        ok, debt, state, ttl = gcra_take(false, now_us, tp[3 * t - 2], tp[3 * t - 1], tp[3 * t], 1)
        f = {ok, debt, state}
        if ok then f[4] = 3 * i - 2 + math.floor((now_ms + ttl) / windows[i]) - wn[i] end
        fresh[t] = f
      end
      ok, debt, state, j = f[1], f[2], f[3], f[4]
    end
    if ok == nil then return put(8, 'throttle:' .. u) end
    if not ok then return put(9, debt) end
    wstate[i][u] = state
    tw = tw or {}
    local list = tw[j]
    if not list then
      list = {}
      tw[j] = list
    end
    list[#list + 1] = u
    list[#list + 1] = state
  end
  local tok = ARGV[a + 5]
  if tok ~= '' and spent[tok] then return put(15) end
  if not_selling then
    if not_selling == 'sale' then return put(8, 'sale') end
    return put(3, not_selling)
  end
  if bad_a then return put(8, bad_a) end

  -- The lines: a corrupt remaining, then unknown skus, a corrupt held
  -- count, the limit, the stock.
  local n, fb = num(ARGV[a + 7]), bf[b]
  local bad_r, unknown, bad_h, over, short
  for i = 0, n - 1 do
    local sku = ARGV[a + 8 + 2 * i]
    local r = rem[sku]
    if r == false then
      unknown = true
    elseif r == 'bad' then
      bad_r = bad_r or sku
    else
      local q, h = num(ARGV[a + 9 + 2 * i]), held[bfields[fb + i + 1]]
      if not h then
        bad_h = bad_h or bfields[fb + i + 1]
      else
        if h + q > limit then over = true end
        if r ~= -1 and r < q then short = true end
      end
    end
  end
  if bad_r then return put(8, 'r:' .. bad_r) end
  if unknown or bad_h or over or short then
    local code = 6
    if unknown then code = 4 elseif bad_h then return put(8, 'bought:' .. bad_h) elseif over then code = 5 end
    local start = o
    out[o + 2] = code
    o = o + 2
    if over then
      o = o + 1
      out[o] = limit
    end
    for i = 0, n - 1 do
      local sku, q = ARGV[a + 8 + 2 * i], num(ARGV[a + 9 + 2 * i])
      local r = rem[sku]
      if unknown then
        if r == false then
          o = o + 1
          out[o] = sku
        end
      elseif over then
        if held[bfields[fb + i + 1]] + q > limit then
          o = o + 1
          out[o] = sku
        end
      elseif r ~= -1 and r < q then
        out[o + 1], out[o + 2] = sku, r
        o = o + 2
      end
    end
    out[start + 1] = o - start - 1
    return
  end

  -- Every check passed: the event, then this buy's part of the writes.
  local record = 'p|' .. u .. now_bar .. ARGV[a + 3] .. '|' .. key
  redis.call('XADD', KEYS[5], '*', 'bought', id .. '|' .. record)
  out[o + 1], out[o + 2], out[o + 3] = n + 2, 0, now_ms
  o = o + 3
  local w = #new_held
  for i = 0, n - 1 do
    local sku, q, f = ARGV[a + 8 + 2 * i], num(ARGV[a + 9 + 2 * i]), bfields[fb + i + 1]
    local r = rem[sku]
    if r ~= -1 then
      r = r - q
      rem[sku] = r
    end
    sold[sku] = (sold[sku] or 0) + q
    o = o + 1
    out[o] = r
    local h0 = held[f]
    local h = h0 + q
    held[f] = h
    -- A first holding is the asked quantity's own argument when it is
    -- written as int takes it (it always is): a number handed to
    -- redis.call costs a printf in Redis, a string does not.
    local hs = ARGV[a + 9 + 2 * i]
    if h0 ~= 0 or not int(hs) then hs = exact(h) end
    new_held[w + 1], new_held[w + 2] = f, hs
    w = w + 2
  end
  if made then made[id] = record end
  if pay then
    deadlines = deadlines or {}
    w = #deadlines
    deadlines[w + 1], deadlines[w + 2] = now_ms + pay, id
  end
  w = #new_orders
  new_orders[w + 1], new_orders[w + 2] = id, record
  if key ~= '' then
    idem[u .. '|' .. key] = id
    new_idem = new_idem or {}
    w = #new_idem
    new_idem[w + 1], new_idem[w + 2] = u .. '|' .. key, id
  end
  if tok ~= '' then
    spent[tok] = true
    new_spent = new_spent or {}
    new_spent[#new_spent + 1] = a
  end
end

for b = 1, count do buy_one(b) end

local sale_writes
for _, sku in ipairs(skus) do
  if sold[sku] then
    if rem[sku] == -1 then
      redis.call('HINCRBY', KEYS[1], 's:' .. sku, exact(sold[sku]))
    else
      sale_writes = sale_writes or {}
      sale_writes[#sale_writes + 1] = 'r:' .. sku
      sale_writes[#sale_writes + 1] = exact(rem[sku])
    end
  end
end
if sale_writes then hset(KEYS[1], sale_writes) end
-- A sale with a payment step counts the units its awaiting orders hold,
-- per sku ("a:<sku>"; pay.lua, expire.lua and cancel.lua take them off).
if deadlines then
  for _, sku in ipairs(skus) do
    if sold[sku] then redis.call('HINCRBY', KEYS[1], 'a:' .. sku, exact(sold[sku])) end
  end
end
if #new_held > 0 then
  hset(KEYS[2], new_held)
  hset(KEYS[3], new_orders)
end
if new_idem then hset(KEYS[4], new_idem) end
if deadlines then
  for i = 1, #deadlines, chunk do
    redis.call('ZADD', KEYS[8], unpack(deadlines, i, math.min(i + chunk - 1, #deadlines)))
  end
end
-- A throttle's state is kept until its TAT has passed, in the hash of the
-- window its expiry falls in (see KEYS[6]), which expires at that
-- window's end; a spent token as long as it could still be presented.
if tw then
  for i = 1, #windows do
    for d = 0, 2 do
      local list = tw[3 * i - 2 + d]
      if list then
        hset(wkey[3 * i - 2 + d], list)
        redis.call('PEXPIRE', wkey[3 * i - 2 + d], (wn[i] + d + 1) * windows[i] - now_ms + 1)
      end
    end
  end
end
if new_spent then
  for _, a in ipairs(new_spent) do
    redis.call('SET', KEYS[7] .. ARGV[a + 5], ARGV[a], 'PX', ARGV[a + 6])
  end
end
return out
