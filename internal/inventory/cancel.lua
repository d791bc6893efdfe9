-- cancel.lua: cancel an order: its units go back to stock and to the buyer's
-- quota, and a "cancelled" event is appended. Cancelling twice changes nothing.
--
-- KEYS[1] sale hash    KEYS[2] bought hash    KEYS[3] orders hash (order.lua,
--         prepended, finds the order's record in it)
-- KEYS[4] events stream
-- KEYS[5] marker of this cancel call: the remaining of each line right after
--         it, as "r1,r2,..." (kept for a day). A call retried after its reply
--         was lost finds it, is no replay, and answers what its first
--         attempt did
-- KEYS[6] deadlines zset: an order awaiting payment leaves it when
--         cancelled (a paid order may be cancelled too: its payment ref stays
--         in the paid hash, a refund is the shop's business); its units
--         leave the sale's "a:<sku>" (units held by awaiting orders)
-- ARGV[1] now, unix ms
-- ARGV[2] order id
-- ARGV[3] user id the order must belong to, "" for any (an operator)
-- ARGV[4] channel to announce the stock that came back on, "" for none
-- ARGV[5] sale id, for the announcement "<sale>|<sku>,<sku>..."
--
-- Reply, the first element is the outcome:
--   {0, record, r1, r2, ...}  cancelled now (or by this call's first attempt,
--                             whose reply was lost); rN is line N's remaining
--                             right after the cancellation
--   {1, record, r1, r2, ...}  was already cancelled (by another call); nothing changed
--   {2}                       the sale is not in Redis: rebuild it, call again
--   {4}                       no such order (or not this user's)
--   {8, field}                a stored value is not what the engine wrote
-- The record returned is the order's record after the call. Every counter
-- it adds to is checked to be an integer (int, int.lua, prepended) first.

local order_id, owner = ARGV[2], ARGV[3]
if redis.call('EXISTS', KEYS[1]) == 0 then return {2} end
local record, group, rs, re = order_get(KEYS[3], order_id)
if not record then return {4} end
local status, user, created, lines, key = string.match(record, '^([pc])|([^|]*)|(%d+)|([^|]*)|(.*)$')
if not status or lines == '' then return {8, 'orders:' .. order_id} end
for line in string.gmatch(lines .. ',', '([^,]*),') do
  if not string.match(line, '^[^=]+=%d+$') then return {8, 'orders:' .. order_id} end
end
if owner ~= '' and owner ~= user then return {4} end

local sku, qty, rem, held = {}, {}, {}, {}
for s, q in string.gmatch(lines, '([^,=]+)=(%d+)') do
  local i = #sku + 1
  sku[i], qty[i] = s, tonumber(q)
  rem[i] = int(redis.call('HGET', KEYS[1], 'r:' .. s))
  if not rem[i] then return {8, 'r:' .. s} end
end

if status == 'c' then
  local code = 1
  local mine = redis.call('GET', KEYS[5])
  if mine then
    -- This call's own first attempt cancelled it: answer as it did, with
    -- the remaining right after it, not now (buys may have come between).
    code = 0
    local kept = {}
    for r in string.gmatch(mine, '[^,]+') do kept[#kept + 1] = tonumber(r) end
    if #kept == #sku then rem = kept end
  end
  local reply = {code, record}
  for i = 1, #sku do reply[i + 2] = rem[i] end
  return reply
end

for i = 1, #sku do
  held[i] = int(redis.call('HGET', KEYS[2], user .. '|' .. sku[i]) or '0')
  if not held[i] then return {8, 'bought:' .. user .. '|' .. sku[i]} end
  if rem[i] == -1 and not int(redis.call('HGET', KEYS[1], 's:' .. sku[i]) or '0') then
    return {8, 's:' .. sku[i]}
  end
end

-- Whether it awaits payment: read before the first write (a deadlines key
-- of another type fails here, with nothing written).
local awaiting = redis.call('ZSCORE', KEYS[6], order_id)
if awaiting then
  for i = 1, #sku do
    if not int(redis.call('HGET', KEYS[1], 'a:' .. sku[i]) or '0') then return {8, 'a:' .. sku[i]} end
  end
end

-- Every check passed: write.
-- The event is the first write: XADD is the one write whose key no check
-- above has read, so if it fails, nothing has been written.
redis.call('XADD', KEYS[4], '*', 'type', 'cancelled', 'order', order_id, 'user', user,
  'items', lines, 'key', key, 'at', ARGV[1], 'created', created)
record = 'c|' .. user .. '|' .. created .. '|' .. lines .. '|' .. key
local reply, kept = {0, record}, {}
for i = 1, #sku do
  if rem[i] == -1 then
    redis.call('HINCRBY', KEYS[1], 's:' .. sku[i], string.format('%d', -qty[i]))
    reply[i + 2] = -1
  else
    reply[i + 2] = redis.call('HINCRBY', KEYS[1], 'r:' .. sku[i], string.format('%d', qty[i]))
  end
  -- Redis before 7 formats Lua numbers with 14 significant digits.
  kept[i] = string.format('%d', reply[i + 2])
  if held[i] - qty[i] > 0 then
    redis.call('HINCRBY', KEYS[2], user .. '|' .. sku[i], string.format('%d', -qty[i]))
  else
    redis.call('HDEL', KEYS[2], user .. '|' .. sku[i])
  end
end
order_put(KEYS[3], order_id, record, group, rs, re)
if awaiting then
  redis.call('ZREM', KEYS[6], order_id)
  for i = 1, #sku do redis.call('HINCRBY', KEYS[1], 'a:' .. sku[i], string.format('%d', -qty[i])) end
end
redis.call('SET', KEYS[5], table.concat(kept, ','), 'EX', 86400)
if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[4], ARGV[5] .. '|' .. table.concat(sku, ',')) end
return reply
