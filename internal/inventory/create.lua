-- create.lua: define a sale, only if it does not exist yet: creating never
-- resets a sale that is already there (its counters stay as they are).
--
-- KEYS[1] sale hash    KEYS[2] events stream
-- ARGV[1] now, unix ms
-- ARGV[2] per-user limit    ARGV[3] starts at, unix ms (0: none)
-- ARGV[4] ends at, unix ms (0: none)    ARGV[5] paused, "1" or "0"
-- ARGV[6] the items as "A=100,B=-1" (kept as field "items": the order of the
--         items, and journaled in the event)
-- ARGV[7] this call's token (kept as field "created"): a call resent after
--         its reply was lost finds the sale it made, and is no conflict
-- ARGV[8] payment timeout, ms (0: none; kept as field "pay" only if set,
--         and journaled as "pay" in the event only then)
-- ARGV[9] "1": a sale of another token is reported the same ({16}) when
--         it is exactly what this call would write — every field but the
--         token, none more — and untouched since (its stream holds its
--         created event alone); "0": never
-- ARGV[10], ARGV[11] a field and its value written with the sale, but
--         never compared by ARGV[9] (saleTableField, keys.go: the value
--         makes Redis keep the hash as a hash table)
-- ARGV[12], ARGV[13], ...  sku, stock of each item (-1 unlimited)
--
-- Reply: {0} created (by this call, or by its first attempt), {10} a sale
-- with this id exists (nothing changed), {16} the same sale exists,
-- untouched (ARGV[9] "1"; nothing changed).

-- same reports whether the sale hash holds exactly what this call would
-- write, but the token.
local function same()
  local want = {limit = ARGV[2], start = ARGV[3], ['end'] = ARGV[4], paused = ARGV[5], items = ARGV[6]}
  if ARGV[8] ~= '0' then want.pay = ARGV[8] end
  for i = 12, #ARGV, 2 do
    local sku, stock = ARGV[i], ARGV[i + 1]
    want['r:' .. sku], want['t:' .. sku] = stock, stock
    if stock == '-1' then want['s:' .. sku] = '0' end
  end
  local got = redis.call('HGETALL', KEYS[1])
  local n = 0
  for i = 1, #got, 2 do
    local f, v = got[i], got[i + 1]
    if f ~= 'created' and f ~= ARGV[10] then
      if want[f] ~= v then return false end
      n = n + 1
    end
  end
  for _ in pairs(want) do n = n - 1 end
  return n == 0
end

if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'created') == ARGV[7] then return {0} end
  if ARGV[9] == '1' and redis.call('XLEN', KEYS[2]) == 1 and same() then return {16} end
  return {10}
end
-- The event is the first write: XADD is the one write whose key no check
-- above has read, so if it fails, nothing has been written.
if ARGV[8] ~= '0' then
  redis.call('XADD', KEYS[2], '*', 'type', 'created', 'items', ARGV[6], 'limit', ARGV[2],
    'start', ARGV[3], 'end', ARGV[4], 'paused', ARGV[5], 'at', ARGV[1], 'pay', ARGV[8])
  redis.call('HSET', KEYS[1], 'pay', ARGV[8])
else
  redis.call('XADD', KEYS[2], '*', 'type', 'created', 'items', ARGV[6], 'limit', ARGV[2],
    'start', ARGV[3], 'end', ARGV[4], 'paused', ARGV[5], 'at', ARGV[1])
end
redis.call('HSET', KEYS[1], ARGV[10], ARGV[11], 'limit', ARGV[2], 'start', ARGV[3], 'end', ARGV[4], 'paused', ARGV[5],
  'items', ARGV[6], 'created', ARGV[7])
-- HSET in chunks: unpack() of a very long list would overflow Lua's C stack.
local batch = {}
for i = 12, #ARGV, 2 do
  local sku, stock = ARGV[i], ARGV[i + 1]
  batch[#batch + 1] = 'r:' .. sku
  batch[#batch + 1] = stock
  batch[#batch + 1] = 't:' .. sku
  batch[#batch + 1] = stock
  if stock == '-1' then
    batch[#batch + 1] = 's:' .. sku
    batch[#batch + 1] = '0'
  end
  if #batch >= 3000 then
    redis.call('HSET', KEYS[1], unpack(batch))
    batch = {}
  end
end
if #batch > 0 then redis.call('HSET', KEYS[1], unpack(batch)) end
return {0}
