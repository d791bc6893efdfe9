-- buy.lua: a batch of buys of one sale, run in order. Each buy is atomic on
-- its own: every line of it is bought or none is, and its order record and
-- order event are written with its deduction. A batch of one is a single buy;
-- a buy in a batch sees the buys before it (their stock, quota and orders).
--
-- KEYS[1] sale hash    KEYS[2] bought hash
-- KEYS[3] orders hash: each order's record under its group (order.lua,
--         prepended): the orders a call buys are usually all of one group,
--         the call's (the engine gives a call's buys ids of one), so the
--         call writes one field, whose value is the text of the call's
--         stream entry of bought orders (below) with the group left out of
--         each line
-- KEYS[4] idem hash    KEYS[5] events stream
-- KEYS[6] the start of the buyers' throttle hashes: KEYS[6] .. w .. ':' .. n
--         maps a user to their rate-limit state (a GCRA TAT, see gcra_take,
--         prepended with script_now) for the states whose TAT passes
--         (expiry, in unix ms, see below) in [n*w, (n+1)*w); every state it
--         holds has passed at (n+1)*w (by the server's clock, which both
--         TIME and key expiry read); it is kept a window more (for a clock
--         that steps back), then the first call that writes a state in
--         window n+2 or later UNLINKs it (it expires at (n+3)*w if none
--         comes). w is the buy's
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
-- KEYS[9] a waiting room's live admissions (package admission,
--         room.lua: "room:live", a zset, user -> until ms), the unused
--         admissions out
-- KEYS[10] the room's settings hash ("room:cfg"): its "nb", the number of
--         its users' state hashes, and "used", how many admissions bought
-- KEYS[11] the start of the room's users' state hashes ("room:b:"): user's
--         state is field user of KEYS[11] .. n, n = (the first 8 hex
--         digits of SHA1(user)) % nb; a live admission's is
--         "a<joined ms>:<nonce>:<until ms>:<in draw>" and a used one's
--         "u<joined ms>:<nonce>:<in draw>:<order id>" (package admission,
--         room.lua). A gated buy (below) is accepted only if its user's
--         state is a live admission whose nonce is the buy's and whose
--         until is the buy's gate, and the script's clock is before that
--         until: the until alone does not tell one admission of a user
--         from another that ends at the same ms (every admission granted
--         within admit_ttl of the room's end ends at the end), such as
--         one a room lost (Redis lost it, the room was made again) and the
--         user's new one. A buy it accepts spends the admission in the
--         room at once, as the room would: the state becomes the used one
--         (with the buy's order id), the user leaves KEYS[9] and "used"
--         counts it. That state is what makes an admission single use: a
--         used or lapsed one is never live again, and a new admission has
--         a new nonce, so the buy writes no spent mark (KEYS[7]). It does
--         send its nonce to the system of record with its order (its
--         "tokens" line, until the admission's until), and is refused if
--         a mark of it is there: one a rebuild or a repair put back from
--         the system of record, after Redis lost the room's write of the
--         spend but not the admission (a failover to a lagging replica
--         whose orders the database had already taken)
-- ARGV[1] now, unix µs, or "" to read the Redis server's clock (TIME), the
--         one clock every instance shares (a test may stand in for it)
-- ARGV[2] number of buys
-- ARGV[3] number of throttles t, then t throttles, each as rate, period µs,
--         capacity and window ms
-- then the number of shared shapes s, then s shapes; a buy's shape is
--   its idempotency key ("" for none), the lines as "A=1,B=2", its
--   throttle (1..t, 0 for none), the purchase token to spend ("" for
--   none) and the ms to keep it spent, the number of lines n, then n
--   pairs: sku, qty (a positive integer in decimal, as int takes it: a
--   first holding is stored as this very argument), then "1" if the
--   shape's buys are gated ("" for not): a gated shape has no token (""),
--   each of its buys carries its own (see KEYS[11])
-- then the call's group cg: its buys whose order ids are of group cg
--   (order.lua) send only their tails (four characters), every other buy
--   its whole id (longer): usually every id is of the call's group
-- then, for each buy: user id, new order id (see cg), and its shape's number
--   (1..s) or 0 with its shape right after it, then, for a buy of a gated
--   shape, its admission's nonce and the until in unix ms its user's live
--   admission must have. The buys of a crowd are mostly one shape (one
--   unit of the hot sku, no key, no token; or the same gated): sent once
--   per call, a buy is then three arguments (five gated), not eleven
-- then, after the buys, the number k of buys whose order id the caller
--   chose, and their places (1..count): a resend of one finds its order
--   in its group or, stored before order groups, in a field of the order
--   id (order.lua); an id the engine chose is of the call's group
-- then the stream mode: "1" one entry for the call's
--   bought orders (where the server has XSETID), "0" one entry per order
-- then "1" if the buys are distinct: no two have the same user or the
--   same order id, none has an idempotency key, and no buy names a sku
--   twice (the engine never sends one that does); "0" otherwise. A buy
--   then never sees another buy of the call's holding or order, so the
--   script keeps them by place instead of by name (a table keyed by
--   strings costs Lua an insertion per buy)
--
-- A bought order's event is "<order id>|<order record>" (the record as in
-- the orders hash, see record.go; its time is the event's). A call that
-- buys one order of the call's group cg (see above) appends one stream
-- entry of fields "group" and "lines" (below) of that order, in either
-- stream mode; one of another group, one of one field, "bought": the
-- event. A call that buys n > 1 appends, in stream mode "1" on a server
-- that has XSETID (Redis: redis.REDIS_VERSION_NUM is set, 7.0 on; the
-- embedded server has neither), ONE entry of two fields, "group": the
-- orders' group (order.lua), and "lines": the lines "<tail>|<order
-- record>" of the n orders joined by newlines (no id, record or
-- idempotency key holds one), the very text the call adds to the group's
-- value; or, when the orders are not all of the call's group cg (see
-- above), one field "orders": the n events joined by newlines; and moves
-- the stream's last id from the entry's <ms>-<seq> to
-- <ms>-<seq+n-1> (XSETID): order k (from 0) owns the id <ms>-<seq+k>,
-- which no later entry can take. An entry whose orders spent purchase
-- tokens has one more field, "tokens": a line "<order id>|<token>|<until,
-- unix ms>" per such order (spent.go); the system of record keeps them
-- with the orders. An entry without one is as above. ParseEntry
-- (events.go) decodes either. A seq of more than 15 digits (never
-- generated by '*' but after an id set by hand near 2^64) would not add up
-- exactly in Lua's doubles, or could pass 2^64-1: the entry is deleted
-- again (XDEL, before anything else is written) and each order gets an
-- entry of its own, "bought", as in mode "0".
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
--   15                        the purchase token was spent by an earlier buy,
--                             or its gate is not open (see KEYS[11])
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
-- against those values, gathering each bought order's event as it goes, and
-- writes the events, counters, records, throttles and spent tokens once at
-- the end. The first write is the first XADD, and no write after it can
-- fail on a value checked here (XSETID's id is above the entry's): Redis
-- does not roll back a script that fails half way, and refuses a script's
-- writes for lack of memory only before its first.

-- The globals the script reads per buy, as locals (a global is a table
-- lookup by name each time).
local ARGV, KEYS, redis, string, math = ARGV, KEYS, redis, string, math

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

-- Parse the buys: no table per buy. Buy b's user and order id are ARGV[at[b]]
-- and the next, its shape starts at ARGV[sh[b]] (key, lines, throttle,
-- token, token ttl, n, then n sku, qty pairs; see the top); its bought
-- fields are bfields[bf[b] + 1 ..]. rem has every asked sku (true until
-- the sale is read), skus lists them once each and rfields the sale's
-- fields to read; ifields the idempotency fields and tkeys the token
-- keys, if any. shapes[k] is where shared shape k starts. nums[p] is the
-- number ARGV[p] of a shape: its number of lines (p = d + 5 for the shape
-- at d, set once its skus are in rem) and its quantities, parsed once per
-- shape; odd[p] is true for a quantity not written as int takes it (see
-- the writes below; the engine sends none, so odd is seldom made).
-- (Every table costs a call about as much as a few string operations, and
-- its first key as much again: the script makes few of either per call.)
local at, sh, bf, bfields = {}, {}, {}, {}
local nums, odd = {}, nil
local rem, skus = {}, {}
local rfields = {'limit', 'start', 'end', 'paused', 'fenced', 'pay', 'orders'}
local ifields, tkeys, spent
-- gt[b]: where gated buy b's nonce is (its until next). gated[user]: a
-- gated buy's user's live admission in the room (KEYS[11]), {nonce,
-- until, joined, in draw, state hash}, false for none (or one a buy of
-- this call spent), 'bad' for a state hash that is not a hash; gusers
-- lists them once each (both made for the first gated buy)
local gt, gated, gusers
local a = 4 + 4 * nth
local cg = ARGV[a]
local shapes = {}
local ns = num(ARGV[a + 1])
a = a + 2
for k = 1, ns do
  shapes[k] = a
  a = a + 7 + 2 * num(ARGV[a + 5])
end
for b = 1, count do
  local u, s = ARGV[a], ARGV[a + 2]
  local d = a + 3
  if s ~= '0' then d = shapes[num(s)] end
  local n = nums[d + 5]
  if not n then
    n = num(ARGV[d + 5])
    nums[d + 5] = n
    for i = d + 6, d + 4 + 2 * n, 2 do
      local sku = ARGV[i]
      if not rem[sku] then
        rem[sku] = true
        skus[#skus + 1] = sku
        rfields[#rfields + 1] = 'r:' .. sku
      end
      nums[i + 1] = num(ARGV[i + 1])
      if not int(ARGV[i + 1]) then
        odd = odd or {}
        odd[i + 1] = true
      end
    end
  end
  at[b], sh[b], bf[b] = a, d, #bfields
  if ARGV[d] ~= '' then
    ifields = ifields or {}
    ifields[#ifields + 1] = u .. '|' .. ARGV[d]
  end
  if ARGV[d + 2] ~= '0' then
    local i = wplace[num(ARGV[d + 2])]
    if wstate[i][u] == nil then
      wstate[i][u] = false
      wusers[i][#wusers[i] + 1] = u
    end
  end
  -- nxt: where the next buy starts
  local nxt = a + 3
  if s == '0' then nxt = d + 7 + 2 * n end
  local tok = ARGV[d + 3]
  if tok ~= '' then
    if not spent then spent, tkeys = {}, {} end
    if spent[tok] == nil then
      spent[tok] = false
      tkeys[#tkeys + 1] = KEYS[7] .. tok
    end
  elseif ARGV[d + 6 + 2 * n] == '1' then
    gt = gt or {}
    gt[b] = nxt
    tok = ARGV[nxt]
    nxt = nxt + 2
    if not spent then spent, tkeys = {}, {} end
    if spent[tok] == nil then
      spent[tok] = false
      tkeys[#tkeys + 1] = KEYS[7] .. tok
    end
    if not gated or gated[u] == nil then
      if not gated then gated, gusers = {}, {} end
      gated[u] = false
      gusers[#gusers + 1] = u
    end
  end
  local w = #bfields
  for i = 1, n do bfields[w + i] = u .. '|' .. ARGV[d + 4 + 2 * i] end
  a = nxt
end
-- whole(b): buy b's order id: its argument, or cg and the tail it sent
local function whole(b)
  local t = ARGV[at[b] + 1]
  if #t == 4 then return cg .. t end
  return t
end
-- own_at: the buys whose order id the caller chose, from ARGV[a + 1] on
-- (ARGV[a] of them): a resend of one may find its order stored before
-- order groups, in a field of its own (order.lua)
local own_n, own_at = ARGV[a] and num(ARGV[a]) or 0, a + 1
a = a + 1 + own_n
local one_entry = ARGV[a] == '1' and redis.REDIS_VERSION_NUM ~= nil
local distinct = ARGV[a + 1] == '1'

-- The sale: its definition and every asked sku's remaining, in one read.
-- rem[sku]: remaining (-1 unlimited); false: no such sku; 'bad': corrupt,
-- and so is the sold counter of an unlimited sku that is not an integer.
local meta = read('HMGET', KEYS[1], rfields)
if not meta[1] then return {2} end
local unlimited
for i, sku in ipairs(skus) do
  local v = meta[7 + i]
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
-- integer, or negative: one would let the buyer past the limit); f is the
-- field, or its place in bfields when the buys are distinct (see the top).
local held = {}
local v = read('HMGET', KEYS[2], bfields)
for i = 1, #bfields do
  local h, f = v[i], i
  if not distinct then f = bfields[i] end
  if h then
    h = int(h)
    held[f] = h and h >= 0 and h or false
  else
    held[f] = 0
  end
end
-- gof[b]: buy b's order group; gval[g]: group g's stored value, or false
-- (a call's own group has none, unless the call is a resend).
local gof, gval, glist = {}, {}, {}
for b = 1, count do
  local t, g = ARGV[at[b] + 1], cg
  if #t ~= 4 then g = order_group(t) end
  gof[b] = g
  if gval[g] == nil then
    gval[g] = false
    glist[#glist + 1] = g
  end
end
v = read('HMGET', KEYS[3], glist)
-- own[b]: the record in the own field of buy b's order id, for the buys
-- whose id the caller chose (see own_at), or nil.
local own
if own_n > 0 then
  own = {}
  local oids = {}
  for i = 1, own_n do oids[i] = whole(num(ARGV[own_at + i - 1])) end
  local ov = read('HMGET', KEYS[3], oids)
  for i = 1, own_n do own[num(ARGV[own_at + i - 1])] = ov[i] or nil end
end
-- A group's value is its orders, a line each (order.lua): one that has a
-- line of another group is corrupt ('bad'), and so is each buy of it.
-- (Only a resend, or a buy of a caller's own id, finds one at all.)
for i, g in ipairs(glist) do
  local gv = v[i]
  if gv and not group_sound(g, gv) then gv = 'bad' end
  gval[g] = gv
end
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
-- bad_gate: the room's key the gated buys' writes would fail on (the live
-- admissions', KEYS[9], not a zset; the settings not a hash, or their
-- "used" not an integer), for code 8 to the gated buys: found here,
-- before the first write, since a write failing after it would leave the
-- call half run.
local bad_gate
if gated then
  local ty = redis.call('TYPE', KEYS[9])
  if type(ty) == 'table' then ty = ty.ok or ty['ok'] end
  if ty ~= 'zset' and ty ~= 'none' then bad_gate = 'room:live' end
  local cfg = redis.pcall('HMGET', KEYS[10], 'nb', 'used')
  local nb
  if cfg.err then
    bad_gate = 'room:cfg'
  else
    nb = tonumber(cfg[1] or '')
    if cfg[2] and not int(cfg[2]) then bad_gate = 'room:cfg' end
  end
  -- (A user's own state hash that is not a hash is that user's buys'
  -- corruption only: gated[u] 'bad'.)
  for _, u in ipairs(gusers) do
    if nb and nb >= 1 then
      local key = KEYS[11] .. string.format('%d', tonumber(string.sub(redis.sha1hex(u), 1, 8), 16) % nb)
      local st = redis.pcall('HGET', key, u)
      if type(st) == 'table' and st.err then
        gated[u] = 'bad'
      elseif st then
        local joined, nonce, till, indraw = string.match(st, '^a(%d+):(%x+):(%d+):([01])$')
        if joined then gated[u] = {nonce, tonumber(till), joined, indraw, key} end
      end
    end
  end
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
-- norders: how many orders the orders hash holds (the sale's "orders");
-- none on a sale stored before the engine kept it, whose hash then holds a
-- field per order (see order.lua), which HLEN counts; bad_o: corrupt
local norders, bad_o = meta[7], false
if norders then
  norders = int(norders)
  bad_o = not norders or norders < 0
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
-- integer key under 2^26. None here is: the integer keys are places of
-- buys, fields or arguments, below the call's argument count.)

-- Writes, gathered for the end: field, value pairs by hash (a field
-- written twice takes its last value); made[id]: the records this batch
-- made (a later buy of the batch may repeat one); sold[sku]: units this
-- batch sold of a sku; tw[j]: the throttle states for hash wkey[j];
-- tails: whether every bought order was bought by its tail (see cg);
-- ncg: '\n' .. cg, made once.
local new_held, sold, events, tails = {}, {}, {}, true
local made, new_idem, new_spent, tw, og, ncg
-- new_used: the gated buys accepted, each {user, its admission (gated)}
local new_used
if count > 1 and not distinct then made = {} end

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
  if l ~= ARGV[sh[b] + 1] then return put(14, id) end
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
-- and the place of the hash that state goes in (see the buys below)
local fresh = {}

-- The buys, in order. Each is one pass of a repeat ... until true, which a
-- repeat or a refusal leaves with break once it has put its reply. (Not a
-- function called per buy: a closure of the fifty-odd locals it uses costs
-- the call more than all its own work, a batch of one's included.)
for b = 1, count do
  repeat
    local a, d = at[b], sh[b]
    local u, key = ARGV[a], ARGV[d]
    -- tail: the tail the buy sent (see cg), false for a whole id; id: the
    -- whole id, made only where it is needed (a crowd's buys need none)
    local tail, id = ARGV[a + 1], false
    if #tail ~= 4 then
      id = tail
      tail = false
    end
    -- A repeat (same idempotency key, or a retried call with the same order
    -- id) returns the order it made, whatever the sale's state is now.
    if key ~= '' then
      local prev = idem[u .. '|' .. key]
      if prev then
        local rec = made and made[prev]
        if not rec then rec = order_get(KEYS[3], prev) end
        replay(prev, rec, b, true) break
      end
    end
    if gval[gof[b]] == 'bad' then put(8, 'orders:' .. gof[b]) break end
    if made or gval[gof[b]] or own then id = id or whole(b) end
    local existing = made and made[id] or gval[gof[b]] and order_in(gval[gof[b]], id) or own and own[b]
    if existing then replay(id, existing, b, false) break end

    if ARGV[d + 2] ~= '0' then
      local t = num(ARGV[d + 2])
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
      if ok == nil then put(8, 'throttle:' .. u) break end
      if not ok then put(9, debt) break end
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
    local tok, g = ARGV[d + 3], nil
    if tok ~= '' then
      if spent[tok] then put(15) break end
    elseif gt and gt[b] then
      if bad_gate then put(8, bad_gate) break end
      g = gated[u]
      if g == 'bad' then put(8, 'room:b') break end
      local p = gt[b]
      tok = ARGV[p]
      if spent[tok] or not g or g[1] ~= tok or g[2] ~= tonumber(ARGV[p + 1]) or now_ms >= g[2] then put(15) break end
    end
    if not_selling then
      if not_selling == 'sale' then put(8, 'sale') break end
      put(3, not_selling) break
    end
    if bad_a then put(8, bad_a) break end
    if bad_o then put(8, 'orders') break end

    -- The lines: a corrupt remaining, then unknown skus, a corrupt held
    -- count, the limit, the stock.
    local n, fb = nums[d + 5], bf[b]
    local bad_r, unknown, bad_h, over, short
    for i = 0, n - 1 do
      local sku = ARGV[d + 6 + 2 * i]
      local r = rem[sku]
      if r == false then
        unknown = true
      elseif r == 'bad' then
        bad_r = bad_r or sku
      else
        local j = fb + i + 1
        local q, h = nums[d + 7 + 2 * i], held[distinct and j or bfields[j]]
        if not h then
          bad_h = bad_h or bfields[fb + i + 1]
        else
          if h + q > limit then over = true end
          if r ~= -1 and r < q then short = true end
        end
      end
    end
    if bad_r then put(8, 'r:' .. bad_r) break end
    if unknown or bad_h or over or short then
      local code = 6
      if unknown then code = 4 elseif bad_h then put(8, 'bought:' .. bad_h) break elseif over then code = 5 end
      local start = o
      out[o + 2] = code
      o = o + 2
      if over then
        o = o + 1
        out[o] = limit
      end
      for i = 0, n - 1 do
        local sku, q = ARGV[d + 6 + 2 * i], nums[d + 7 + 2 * i]
        local r = rem[sku]
        if unknown then
          if r == false then
            o = o + 1
            out[o] = sku
          end
        elseif over then
          local j = fb + i + 1
          if held[distinct and j or bfields[j]] + q > limit then
            o = o + 1
            out[o] = sku
          end
        elseif r ~= -1 and r < q then
          out[o + 1], out[o + 2] = sku, r
          o = o + 2
        end
      end
      out[start + 1] = o - start - 1
      break
    end

    -- Every check passed: the event, then this buy's part of the writes.
    -- (the event's pieces: joined once, at the end; see events below)
    local e = #events
    local line = (tail or '') .. '|p|' .. u .. now_bar .. ARGV[d + 1] .. '|' .. key
    if tail then
      -- (every event's first piece but the first's after a '\n')
      if e == 0 then
        events[1] = cg
      else
        ncg = ncg or '\n' .. cg
        events[e + 1] = ncg
      end
    else
      events[e + 1] = e == 0 and id or '\n' .. id
      tails = false
    end
    events[e + 2] = line
    out[o + 1], out[o + 2], out[o + 3] = n + 2, 0, now_ms
    o = o + 3
    local w = #new_held
    for i = 0, n - 1 do
      local sku, q, f = ARGV[d + 6 + 2 * i], nums[d + 7 + 2 * i], bfields[fb + i + 1]
      local r = rem[sku]
      if r ~= -1 then
        r = r - q
        rem[sku] = r
      end
      sold[sku] = (sold[sku] or 0) + q
      o = o + 1
      out[o] = r
      local hk = f
      if distinct then hk = fb + i + 1 end
      local h0 = held[hk]
      local h = h0 + q
      held[hk] = h
      -- A first holding is the asked quantity's own argument when it is
      -- written as int takes it (it always is): a number handed to
      -- redis.call costs a printf in Redis, a string does not.
      local hs = ARGV[d + 7 + 2 * i]
      if h0 ~= 0 or odd and odd[d + 7 + 2 * i] then hs = exact(h) end
      new_held[w + 1], new_held[w + 2] = f, hs
      w = w + 2
    end
    if made then made[id] = string.sub(line, tail and 6 or 2) end
    if pay or key ~= '' or g then id = id or whole(b) end
    if pay then
      deadlines = deadlines or {}
      w = #deadlines
      deadlines[w + 1], deadlines[w + 2] = now_ms + pay, id
    end
    -- og: the one group of the call's bought orders, false for several
    if og == nil then og = gof[b] elseif og ~= gof[b] then og = false end
    if key ~= '' then
      idem[u .. '|' .. key] = id
      new_idem = new_idem or {}
      w = #new_idem
      new_idem[w + 1], new_idem[w + 2] = u .. '|' .. key, id
    end
    if tok ~= '' then
      spent[tok] = true
      new_spent = new_spent or {}
      new_spent[#new_spent + 1] = b
    end
    if g then
      -- used: no other buy of the call finds it live
      gated[u] = false
      new_used = new_used or {}
      new_used[#new_used + 1] = {u, g, id}
    end
  until true
end

-- The events: the first write (see the top).
-- (events holds each event as two pieces: cg, then its line in cg's value,
-- "<tail>|<record>"; or, for an order bought by its whole id, the id, then
-- "|<record>"; every first piece but the first after a '\n': a piece is a
-- cost of table.concat, a string one of each buy. Joined, they are the
-- call's orders as "<order id>|<record>" lines.)
local ne = #events / 2
-- event(i): event i's order id, and its line after it ("|<record>")
local function event(i)
  local p1, p2 = events[2 * i - 1], events[2 * i]
  if string.byte(p2, 1) ~= 124 then return cg .. string.sub(p2, 1, 4), string.sub(p2, 5) end
  if i > 1 then p1 = string.sub(p1, 2) end
  return p1, p2
end
-- joined_events(): the events joined (see above)
local function joined_events() return table.concat(events) end
-- lines: when every order was bought by its tail (usually), the lines
-- "<tail>|<record>" of cg's value: the events joined with their first
-- pieces (cg) cut to the newline before them (event(i) reads a tail's
-- event from its second piece alone), both
-- the call's stream entry (fields "group", "lines") and what it adds to
-- cg's value; one string for both.
local lines
if ne == 1 and tails then
  lines = events[2]
elseif ne > 1 and tails then
  events[1] = ''
  for i = 3, #events, 2 do events[i] = '\n' end
  lines = joined_events()
end
-- tokline[order id]: the "tokens" line of an order that spent a token
-- (see the top); none without a token buy.
local tokline
if new_spent then
  tokline = {}
  for _, b in ipairs(new_spent) do
    local p, id = gt and gt[b], whole(b)
    if p then
      -- a gated nonce: spent until its admission's until, past which no
      -- buy is let through the gate anyway
      tokline[id] = id .. '|' .. ARGV[p] .. '|' .. ARGV[p + 1]
    else
      local d = sh[b]
      tokline[id] = id .. '|' .. ARGV[d + 3] .. '|' .. string.format('%d', now_ms + num(ARGV[d + 4]))
    end
  end
end
-- (an entry by tail of one order needs no XSETID: it is one entry per
-- order too)
if ne > 1 and one_entry or ne == 1 and lines then
  local id, f
  if lines then
    f = {'group', cg, 'lines', lines}
  else
    f = {'orders', joined_events()}
  end
  if tokline then
    local tl = {}
    for i = 1, ne do tl[#tl + 1] = tokline[(event(i))] end
    f[#f + 1], f[#f + 2] = 'tokens', table.concat(tl, '\n')
  end
  id = redis.call('XADD', KEYS[5], '*', unpack(f))
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if ne == 1 then
    ne = 0
  elseif #seq <= 15 then
    redis.call('XSETID', KEYS[5], ms .. '-' .. string.format('%d', tonumber(seq) + ne - 1))
    ne = 0
  else
    redis.call('XDEL', KEYS[5], id)
  end
end
for i = 1, ne do
  local id, rest = event(i)
  local tl = tokline and tokline[id]
  local ev = id .. rest
  if tl then
    redis.call('XADD', KEYS[5], '*', 'bought', ev, 'tokens', tl)
  else
    redis.call('XADD', KEYS[5], '*', 'bought', ev)
  end
end

local sale_writes
if #new_held > 0 then
  norders = norders or redis.call('HLEN', KEYS[3])
  sale_writes = {'orders', exact(norders + #events / 2)}
end
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
  -- Each group's new orders after those it holds (a resend's): usually
  -- all of the call's group, each bought by its tail: the events joined
  -- without their first pieces, cg (nothing reads the events after this).
  if og and lines then
    local list = lines
    if gval[og] then list = gval[og] .. '\n' .. list end
    redis.call('HSET', KEYS[3], og, list)
  else
    local groups = {}
    for i = 1, #events / 2 do
      local id, rest = event(i)
      local g = order_group(id)
      local list = groups[g]
      if not list then
        list = {}
        groups[g] = list
      end
      list[#list + 1] = order_tail(id) .. rest
    end
    local writes = {}
    for g, list in pairs(groups) do
      list = table.concat(list, '\n')
      if gval[g] then list = gval[g] .. '\n' .. list end
      writes[#writes + 1], writes[#writes + 2] = g, list
    end
    hset(KEYS[3], writes)
  end
end
if new_idem then hset(KEYS[4], new_idem) end
if deadlines then
  for i = 1, #deadlines, chunk do
    redis.call('ZADD', KEYS[8], unpack(deadlines, i, math.min(i + chunk - 1, #deadlines)))
  end
end
-- A throttle's state is kept until its TAT has passed, in the hash of the
-- window its expiry falls in (see KEYS[6]); a spent token as long as it
-- could still be presented. A window's hash is kept one window past its
-- end (its states have all passed, but a clock that steps back by up to a
-- window still finds them), then the first call that writes states UNLINKs
-- it, so that Redis frees its fields (one per buyer of the window, 10^5
-- and more under load) in a background thread. Left to expire, it would
-- be freed in Redis's one thread, which stood still for 19-44 ms every
-- window under a load of 25,000-30,000 fresh buyers a second
-- (docs/performance.md, "Latency: the open loop"). Its expiry, two windows
-- after its end, removes it when no call comes to do so (an UNLINK of an
-- expired key would free it in this thread too).
if tw then
  for i = 1, #windows do
    redis.call('UNLINK', KEYS[6] .. windows[i] .. ':' .. string.format('%d', wn[i] - 2))
    for d = 0, 2 do
      local list = tw[3 * i - 2 + d]
      if list then
        hset(wkey[3 * i - 2 + d], list)
        redis.call('PEXPIRE', wkey[3 * i - 2 + d], (wn[i] + d + 3) * windows[i] - now_ms + 1)
      end
    end
  end
end
-- The spent marks; none of a gated nonce (the room's state spends it).
if new_spent then
  for _, b in ipairs(new_spent) do
    if not (gt and gt[b]) then
      local d = sh[b]
      redis.call('SET', KEYS[7] .. ARGV[d + 3], ARGV[at[b]], 'PX', ARGV[d + 4])
    end
  end
end
-- The admissions the gated buys spent, used in the room (see KEYS[11]).
if new_used then
  local gone = {}
  for i, x in ipairs(new_used) do
    local g = x[2]
    redis.call('HSET', g[5], x[1], 'u' .. g[3] .. ':' .. g[1] .. ':' .. g[4] .. ':' .. x[3])
    gone[i] = x[1]
  end
  for i = 1, #gone, chunk do redis.call('ZREM', KEYS[9], unpack(gone, i, math.min(i + chunk - 1, #gone))) end
  redis.call('HINCRBY', KEYS[10], 'used', #gone)
end
return out
