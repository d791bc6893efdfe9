-- room.lua: a sale's waiting room. One operation a call, named by ARGV[1];
-- every one of them needs the room's settings (KEYS[1]) and answers {1}
-- without touching anything when they are missing, but create, which
-- makes them, and remove, which answers {0}. Every other operation first
-- seals the draw (seal, below) if its time has come.
--
-- KEYS[1] room:cfg hash. The settings: "fp" (all of them, as create got
--         them), "opens", "draw", "ends" (unix ms, 0 none), "rate" (0
--         automatic), "cap", "ttl" (ms), "max", "nb" (buckets: a power of
--         two, about max/64, at most 65536). The draw: "sealed", "drawn"
--         (0/1), "dsize" (its entrants), "dlen" (how many drawpart wrote).
--         The line: "seq" (arrivals so far), "head" (ranks admitted),
--         "waiting" (users with a rank not admitted yet), "drawing"
--         (entrants until the draw is written). Totals: "admitted", "used",
--         "lapsed". "tat": the admission clock (GCRA), unix µs
-- KEYS[2] room:dj list: the users who joined before the draw, in join order
-- KEYS[3] room:dq list: the users of the draw, in the draw's order, from
--         the first not yet admitted
-- KEYS[4] room:aq list: the users who joined after the draw (or again after
--         a lapse), in arrival order, from the first not yet admitted
-- KEYS[5] room:live zset: user -> admitted until (unix ms): the unused
--         admissions out
-- KEYS[6] room:rate hash: "<unix second>" -> admissions in that second,
--         the last 11 seconds
-- KEYS[7] the start of the buckets' keys: the user's state is field user
--         of KEYS[7] .. n, n = (first 8 hex digits of SHA1(user)) % nb. It
--         is the engine's gate too: a buy spends an admission only while
--         the user's state here is that admission ('a', its nonce and
--         until) and before until, and spends it in its own script as use
--         would: the state becomes used ('u', with the order id), the user
--         leaves KEYS[5] and "used" counts it (inventory's buy.lua, KEYS[9]
--         to KEYS[11], reads "nb" and the state as bucket() finds them and
--         writes them so: keep the two alike)
-- KEYS[8] the sale hash (the engine's): "items" "A=100,B=-1", "r:<sku>"
--         remaining (-1 unlimited), "start", "end" (unix ms, 0 none),
--         "paused" ("1"), "fenced" (set: the database sells)
-- KEYS[9] the sale's deadlines zset: the reservations awaiting payment
-- ARGV[1] the operation    ARGV[2] now, unix µs, or "" for Redis's TIME
--         (script_now, clock.lua, prepended)    ARGV[3]... the operation's
--
-- A user's state is one string:
--   drawing  "d<joined ms>"
--   waiting  "w<rank>:<joined ms>"   rank 1..dsize drawn, then arrivals
--   admitted "a<joined ms>:<nonce>:<until ms>:<in draw 0/1>"
--   used     "u<joined ms>:<nonce>:<in draw 0/1>:<order id>"
--   lapsed   "l<joined ms>:<nonce>:<in draw 0/1>"
-- Ranks are admitted in order: the draw's (dq) once written, then the
-- arrivals' (aq); head counts the ranks admitted, so a waiting user's
-- position is rank - head.
--
-- Operations and their replies ({1}: no room, for every one but create
-- and remove):
--   create opens_ms draw_ms ends_ms rate cap ttl_ms max
--        {0} made, or there with these settings; {5} there with others;
--        {6} the sale hash is missing
--   join user...    {0, <facts>, <joined>...}, a <joined> a user, in
--                   order: {0, <place>...} or {3} full (the same user
--                   twice: the second finds the first's place); {2} not
--                   open
--   place user      {0, <place>...}; {4} never joined
--       <place> = status, joined ms, in draw (0/1), position, nonce,
--       admitted until ms, order id, admissions over the last 10 s
--   step base facts {0, admitted, lapsed, needs draw (0/1)}, and <facts>
--                   fifth when facts is 1; base: random hex the
--                   admissions' nonces are made from
--   facts           {0, <facts>}
--       <facts> = {sold out now (0/1), admissions over the last 10 s,
--       the sale's end ms (0 none, -1 no sale hash), the room's end ms,
--       now ms, version (counts the facts' reads, see facts())}: what a place of the room shares with every other
--   entrants        {0, the draw is to be written (0/1), dsize}
--   drawpart offset user...
--                   the draw's users of ranks offset+1...: {0}; {7, why}
--                   when they are not the entrants in one order
--   drawdone        {0} the draw is in place (or was); {7, why} not all
--                   of it is written
--   stats           {0, waiting, drawing, admitted, used, lapsed, live,
--                   rate, dsize, drawn}
--   rate r          {0}
--   remove          {0}: every key of the room unlinked (or none was)
--
-- Writes come after the checks, but seal's: sealing is right whenever the
-- time has come, whatever the operation then does. (A place is also read
-- without this script, in Go: Rooms.Place, which must answer as place
-- does.)

local KEYS, ARGV, redis, string, math = KEYS, ARGV, redis, string, math
local op = ARGV[1]
local now_us = script_now(ARGV[2])
local now_ms = math.floor(now_us / 1000)

-- grace_ms: how long past its until an admission is kept among the live
-- ones before it lapses (no buy spends it past its until: the engine's
-- gate checks the time by the same clock). credit_us: how far the admission
-- clock catches up on steps that came late (a loaded instance, steps of
-- several instances in phase), so the rate holds over every second. A
-- step that finds fewer buyers or units than the clock allows starts the
-- clock again from now and marks it idle ("tidle"): after an idle step it
-- catches up idle_credit_us at most (one step period), so a crowd
-- arriving after a lull is admitted at the rate, not in a burst.
-- max_step: admissions one call makes at most.
local grace_ms, credit_us, idle_credit_us, max_step = 500, 250000, 20000, 500

local function fmt(n) return string.format('%d', n) end

if op == 'create' then
  local fp = table.concat({ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]}, '|')
  local had = redis.call('HGET', KEYS[1], 'fp')
  if had then
    if had == fp then return {0} end
    return {5}
  end
  if redis.call('EXISTS', KEYS[8]) == 0 then return {6} end
  local max, nb = tonumber(ARGV[9]), 1
  while nb * 64 < max and nb < 65536 do nb = nb * 2 end
  redis.call('HSET', KEYS[1], 'fp', fp, 'opens', ARGV[3], 'draw', ARGV[4], 'ends', ARGV[5],
    'rate', ARGV[6], 'cap', ARGV[7], 'ttl', ARGV[8], 'max', ARGV[9], 'nb', nb,
    'sealed', 0, 'drawn', 0, 'dsize', 0, 'dlen', 0, 'seq', 0, 'head', 0, 'waiting', 0,
    'drawing', 0, 'admitted', 0, 'used', 0, 'lapsed', 0, 'tat', 0)
  return {0}
end

-- c: the settings and counts the operation reads, as numbers (HMGET of
-- those only: in Redis's Lua every string a reply makes costs).
local reads = {
  join = {'opens', 'ends', 'max', 'waiting', 'drawing', 'seq', 'head', 'lapsed'},
  place = {'ends', 'head'},
  step = {'rate', 'cap', 'tat', 'tidle', 'ttl', 'ends', 'waiting', 'head', 'admitted', 'lapsed', 'drawn'},
  facts = {'ends'},
  entrants = {'drawn'},
  drawpart = {'drawn', 'dlen'},
  drawdone = {'drawn', 'dlen', 'waiting'},
  stats = {'waiting', 'drawing', 'admitted', 'used', 'lapsed', 'rate', 'drawn'},
  rate = {},
  remove = {},
}
if not reads[op] then return redis.error_reply('room.lua: unknown operation ' .. tostring(op)) end
local names = {'nb', 'sealed', 'draw', 'dsize'}
for _, f in ipairs(reads[op]) do names[#names + 1] = f end
local raw = redis.call('HMGET', KEYS[1], unpack(names))
if not raw[1] then
  if op == 'remove' then return {0} end
  return {1}
end
local c = {}
for i, f in ipairs(names) do c[f] = tonumber(raw[i]) end

if op == 'remove' then
  local batch = {}
  for n = 0, c.nb - 1 do
    batch[#batch + 1] = KEYS[7] .. n
    if #batch == 1000 then
      redis.call('UNLINK', unpack(batch))
      batch = {}
    end
  end
  if #batch > 0 then redis.call('UNLINK', unpack(batch)) end
  redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
  return {0}
end

-- seal: once Redis's clock reaches draw_until, the draw's entrants are
-- fixed: those in dj. Later joins are arrivals.
if c.sealed == 0 and now_ms >= c.draw then
  c.sealed, c.dsize = 1, redis.call('LLEN', KEYS[2])
  redis.call('HSET', KEYS[1], 'sealed', 1, 'dsize', c.dsize)
end

local function bucket(user)
  return KEYS[7] .. (tonumber(string.sub(redis.sha1hex(user), 1, 8), 16) % c.nb)
end

-- stock(): the remaining of the sale's limited items summed, and whether
-- it has any (false, false: no sale hash).
local function stock()
  local items = redis.call('HGET', KEYS[8], 'items')
  if not items then return false, false end
  local fields = {}
  for sku in string.gmatch(items, '([^,]+)=[^,]*') do fields[#fields + 1] = 'r:' .. sku end
  if #fields == 0 then return 0, false end
  local sum, limited = 0, false
  for i = 1, #fields, 1000 do
    local v = redis.call('HMGET', KEYS[8], unpack(fields, i, math.min(i + 999, #fields)))
    for j = 1, #v do
      local r = tonumber(v[j])
      if r and r >= 0 then sum, limited = sum + r, true end
    end
  end
  return sum, limited
end

-- sale_end(): the sale's end (unix ms, 0 none), false without a sale hash
-- (read once a call).
local the_end
local function sale_end()
  if the_end == nil then
    local e = redis.call('HGET', KEYS[8], 'end')
    the_end = e and (tonumber(e) or 0)
  end
  return the_end
end

-- sold_out: nothing can be bought now nor come back: the sale (or the
-- room) ended, or its limited items have no unit left, none is held by a
-- live admission nor by a reservation awaiting payment. A sale of
-- unlimited items only never sells out.
-- (Read once a call: the same for every user of a join.)
local the_sold_out
local function sold_out()
  if the_sold_out ~= nil then return the_sold_out end
  local function get()
    local e = sale_end()
    if not e then return false end
    if (e > 0 and now_ms >= e) or (c.ends > 0 and now_ms >= c.ends) then return true end
    -- The cheapest check first: while admissions are out, it is not.
    if redis.call('ZCARD', KEYS[5]) > 0 then return false end
    local sum, limited = stock()
    if not limited or sum > 0 then return false end
    return redis.call('ZCARD', KEYS[9]) == 0
  end
  the_sold_out = get()
  return the_sold_out
end

-- recent(): admissions over the 10 whole seconds before this one (read
-- once a call).
local the_recent
local function recent()
  if the_recent then return the_recent end
  local s, f = math.floor(now_ms / 1000), {}
  for i = 1, 10 do f[i] = fmt(s - i) end
  local n = 0
  for _, v in ipairs(redis.call('HMGET', KEYS[6], unpack(f))) do n = n + (tonumber(v) or 0) end
  the_recent = n
  return n
end

-- facts(): <facts> (see the top).
-- They are also written to the settings ("fso", "frec", "fnow", and
-- "fver", counting the writes: the facts' sixth), which a place read in
-- Go reads with the user's state: a read is then never older than the
-- last call that read them (a join's above all, on whatever instance),
-- whatever facts its own instance kept.
local function facts()
  local e = sale_end()
  local so = sold_out() and 1 or 0
  local ver = redis.call('HINCRBY', KEYS[1], 'fver', 1)
  redis.call('HSET', KEYS[1], 'fso', so, 'frec', recent(), 'fnow', now_ms)
  return {so, recent(), e or -1, c.ends, now_ms, ver}
end

-- place(st, user): the reply of user in state st.
local function place(st, user)
  local kind = string.sub(st, 1, 1)
  if kind == 'd' then
    if sold_out() then return {0, 'sold_out', string.sub(st, 2), 1, 0, '', 0, '', 0} end
    return {0, 'drawing', string.sub(st, 2), 1, 0, '', 0, '', 0}
  elseif kind == 'w' then
    local rank, joined = string.match(st, '^w(%d+):(%d+)$')
    rank = tonumber(rank)
    local indraw = (rank <= c.dsize) and 1 or 0
    if sold_out() then return {0, 'sold_out', joined, indraw, 0, '', 0, '', 0} end
    return {0, 'waiting', joined, indraw, rank - c.head, '', 0, '', recent()}
  elseif kind == 'a' then
    local joined, nonce, till, indraw = string.match(st, '^a(%d+):(%x+):(%d+):(%d)$')
    if now_ms >= tonumber(till) then return {0, 'lapsed', joined, tonumber(indraw), 0, '', 0, '', 0} end
    return {0, 'admitted', joined, tonumber(indraw), 0, nonce, till, '', 0}
  elseif kind == 'u' then
    local joined, _, indraw, order = string.match(st, '^u(%d+):(%x*):(%d):(.*)$')
    return {0, 'used', joined, tonumber(indraw), 0, '', 0, order, 0}
  end
  local joined, _, indraw = string.match(st, '^l(%d+):(%x*):(%d)$')
  return {0, 'lapsed', joined, tonumber(indraw), 0, '', 0, '', 0}
end

-- lapse(b, user, st): ends admission st of user (in bucket b), past its
-- until and grace: no buy can spend it any more (a buy that did made it
-- used), so it lapsed. It writes the new state and returns 'l' (false:
-- st is no admission); the caller takes the user out of live and counts.
local function lapse(b, user, st)
  local joined, nonce, _, indraw = string.match(st, '^a(%d+):(%x+):(%d+):(%d)$')
  if not joined then return false end
  redis.call('HSET', b, user, 'l' .. joined .. ':' .. nonce .. ':' .. indraw)
  return 'l'
end

if op == 'join' then
  local e = sale_end()
  if now_ms < c.opens or not e or (e > 0 and now_ms >= e) or (c.ends > 0 and now_ms >= c.ends) then
    return {2}
  end
  -- Each user in turn, as if alone: a user's state is written before the
  -- next user is read (the same user twice finds its place); the lists
  -- and the counts are written once, after the last.
  local out, pushed = {0, false}, {}
  local counts = false
  for i = 3, #ARGV do
    local user = ARGV[i]
    local b = bucket(user)
    local st = redis.call('HGET', b, user)
    -- An admission past its grace that no Step has ended yet ends now, so
    -- that a lapsed user's join is the new place it should be. (Right
    -- whatever the join does next, like seal.)
    if st and string.sub(st, 1, 1) == 'a'
      and now_ms >= tonumber(string.match(st, '^a%d+:%x+:(%d+):')) + grace_ms then
      lapse(b, user, st)
      redis.call('ZREM', KEYS[5], user)
      c.lapsed = c.lapsed + 1
      counts = true
      st = redis.call('HGET', b, user)
    end
    -- A lapsed user joins again at the back.
    if st and string.sub(st, 1, 1) ~= 'l' then
      out[#out + 1] = place(st, user)
    elseif c.waiting + c.drawing >= c.max then
      out[#out + 1] = {3}
    else
      if c.sealed == 1 then
        -- An arrival, or a lapsed user again: the next rank, at the back.
        c.seq, c.waiting = c.seq + 1, c.waiting + 1
        st = 'w' .. fmt(c.dsize + c.seq) .. ':' .. fmt(now_ms)
      else
        c.drawing = c.drawing + 1
        st = 'd' .. fmt(now_ms)
      end
      pushed[#pushed + 1] = user
      counts = true
      redis.call('HSET', b, user, st)
      out[#out + 1] = place(st, user)
    end
  end
  if #pushed > 0 then
    local list = (c.sealed == 1) and KEYS[4] or KEYS[2]
    redis.call('RPUSH', list, unpack(pushed))
  end
  if counts then
    redis.call('HSET', KEYS[1], 'seq', c.seq, 'waiting', c.waiting, 'drawing', c.drawing,
      'lapsed', c.lapsed)
  end
  out[2] = facts()
  return out
end

if op == 'place' then
  local st = redis.call('HGET', bucket(ARGV[3]), ARGV[3])
  if not st then return {4} end
  return place(st, ARGV[3])
end


if op == 'step' then
  local want_facts = ARGV[4] == '1'
  local lapsed0 = c.lapsed
  -- Lapses: admissions past their until and grace.
  local lapsed = 0
  local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now_ms - grace_ms, 'LIMIT', 0, 1000)
  for _, user in ipairs(due) do
    local b = bucket(user)
    if lapse(b, user, redis.call('HGET', b, user) or '') then lapsed = lapsed + 1 end
  end
  c.lapsed = c.lapsed + lapsed
  if #due > 0 then
    for i = 1, #due, 1000 do redis.call('ZREM', KEYS[5], unpack(due, i, math.min(i + 999, #due))) end
  end
  if c.lapsed ~= lapsed0 then redis.call('HSET', KEYS[1], 'lapsed', c.lapsed) end

  local needs_draw = (c.sealed == 1 and c.drawn == 0) and 1 or 0
  -- done(got): the reply, once got were admitted (the facts after them).
  local function done(got)
    if want_facts then return {0, got, lapsed, needs_draw, facts()} end
    return {0, got, lapsed, needs_draw}
  end
  -- idle(): nobody could be admitted though the clock allowed it; the
  -- clock starts again from now (see credit_us).
  local function idle()
    if c.tat < now_us then redis.call('HSET', KEYS[1], 'tat', fmt(now_us), 'tidle', 1) end
    return done(0)
  end
  -- The draw's order comes first: nobody is admitted before it is written.
  if c.waiting == 0 or (needs_draw == 1 and c.dsize > 0) then return idle() end

  -- Only a selling sale admits (and never past the room's end).
  local s = redis.call('HMGET', KEYS[8], 'start', 'end', 'paused', 'fenced')
  local starts, ends = tonumber(s[1]), tonumber(s[2])
  if not (starts and ends) or s[3] == '1' or s[4] or (starts > 0 and now_ms < starts)
    or (ends > 0 and now_ms >= ends) or (c.ends > 0 and now_ms >= c.ends) then
    return idle()
  end

  -- The admission clock (GCRA): admission k is due at tat + k*T; the
  -- ones due by now may go.
  local rate = c.rate
  if rate <= 0 then rate = c.cap end
  local T = 1000000 / rate
  -- A clock never started (0) starts as after an idle step: nothing is
  -- owed from before its first step.
  local tat = c.tat
  local credit = credit_us
  if tat == 0 or c.tidle == 1 then credit = idle_credit_us end
  tat = math.max(tat, now_us - credit)
  local due = 0
  if now_us >= tat then due = math.floor((now_us - tat) / T) + 1 end
  if due == 0 then return done(0) end
  local n = math.min(due, c.waiting, max_step)
  -- The stock: never more live admissions than units left to buy.
  local sum, limited = stock()
  if limited then n = math.min(n, sum - redis.call('ZCARD', KEYS[5])) end
  if n <= 0 then return idle() end

  local till = now_ms + c.ttl
  if c.ends > 0 then till = math.min(till, c.ends) end
  if ends > 0 then till = math.min(till, ends) end
  local got, head, total = 0, c.head, c.admitted
  local live = {}
  while got < n do
    local user = false
    if c.drawn == 1 then user = redis.call('LPOP', KEYS[3]) end
    if not user then user = redis.call('LPOP', KEYS[4]) end
    if not user then break end
    local b = bucket(user)
    local rank, joined = string.match(redis.call('HGET', b, user) or '', '^w(%d+):(%d+)$')
    if rank then
      rank = tonumber(rank)
      got, head, total = got + 1, rank, total + 1
      local nonce = string.sub(redis.sha1hex(ARGV[3] .. ':' .. user .. ':' .. fmt(total)), 1, 32)
      local indraw = (rank <= c.dsize) and '1' or '0'
      redis.call('HSET', b, user, 'a' .. joined .. ':' .. nonce .. ':' .. fmt(till) .. ':' .. indraw)
      live[#live + 1] = fmt(till)
      live[#live + 1] = user
    end
  end
  if got == 0 then return idle() end
  for i = 1, #live, 1000 do redis.call('ZADD', KEYS[5], unpack(live, i, math.min(i + 999, #live))) end
  redis.call('HSET', KEYS[1], 'head', head, 'waiting', c.waiting - got, 'admitted', total,
    'tat', fmt((got < due and got < max_step) and now_us or math.floor(tat + got * T + 0.5)),
    'tidle', (got < due and got < max_step) and 1 or 0)
  local sec = math.floor(now_ms / 1000)
  redis.call('HINCRBY', KEYS[6], fmt(sec), got)
  -- A field a second that admitted: more than 11 only once a second has
  -- passed since the last clean.
  if redis.call('HLEN', KEYS[6]) > 11 then
    for _, f in ipairs(redis.call('HKEYS', KEYS[6])) do
      if tonumber(f) < sec - 10 then redis.call('HDEL', KEYS[6], f) end
    end
  end
  return done(got)
end

if op == 'entrants' then
  return {0, (c.sealed == 1 and c.drawn == 0) and 1 or 0, c.dsize}
end

if op == 'drawpart' then
  if c.drawn == 1 then return {0} end
  if c.sealed == 0 then return {7, 'the draw is not sealed'} end
  local offset = tonumber(ARGV[3])
  if offset + #ARGV - 3 > c.dsize then return {7, 'more users than entrants'} end
  if offset > c.dlen then return {7, 'a part is missing before rank ' .. fmt(offset + 1)} end
  -- Checks first: a rank written already holds its user; a new one is an
  -- entrant not drawn yet (and not twice in this part).
  local writes, seen, push = {}, {}, {}
  for i = 4, #ARGV do
    local user, rank = ARGV[i], offset + i - 3
    local b = bucket(user)
    local st = redis.call('HGET', b, user) or ''
    if rank <= c.dlen then
      if not string.match(st, '^w' .. fmt(rank) .. ':') then
        return {7, 'rank ' .. fmt(rank) .. ' is not ' .. user .. "'s"}
      end
    else
      local joined = string.match(st, '^d(%d+)$')
      if not joined or seen[user] then return {7, user .. ' is not an entrant left to draw'} end
      seen[user] = true
      writes[#writes + 1] = {b, user, 'w' .. fmt(rank) .. ':' .. joined}
      push[#push + 1] = user
    end
  end
  for _, w in ipairs(writes) do redis.call('HSET', w[1], w[2], w[3]) end
  for i = 1, #push, 1000 do redis.call('RPUSH', KEYS[3], unpack(push, i, math.min(i + 999, #push))) end
  if #push > 0 then redis.call('HSET', KEYS[1], 'dlen', c.dlen + #push) end
  return {0}
end

if op == 'drawdone' then
  if c.drawn == 1 then return {0} end
  if c.sealed == 0 then return {7, 'the draw is not sealed'} end
  if c.dlen ~= c.dsize then
    return {7, fmt(c.dlen) .. ' of the ' .. fmt(c.dsize) .. ' entrants are drawn'}
  end
  redis.call('UNLINK', KEYS[2])
  redis.call('HSET', KEYS[1], 'drawn', 1, 'waiting', c.waiting + c.dsize, 'drawing', 0)
  return {0}
end

if op == 'facts' then
  return {0, facts()}
end

if op == 'stats' then
  return {0, c.waiting, c.drawing, c.admitted, c.used, c.lapsed, redis.call('ZCARD', KEYS[5]),
    c.rate, c.dsize, c.drawn}
end

if op == 'rate' then
  redis.call('HSET', KEYS[1], 'rate', ARGV[3])
  return {0}
end
