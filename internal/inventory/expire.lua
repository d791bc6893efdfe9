-- expire.lua: expire the orders of a sale whose payment deadline has
-- passed: each is cancelled as cancel.lua cancels (its units go back to
-- stock and to the buyer's quota and leave the sale's "a:<sku>", the units
-- held by awaiting orders; its record becomes cancelled) and an
-- "expired" event is appended, in the script that takes it off the
-- deadlines, so it happens exactly once however many instances run this
-- at once. A pay (pay.lua) wins while now < pay_by; this takes an order
-- once pay_by <= now, by the same clock (TIME).
--
-- KEYS[1] sale hash    KEYS[2] bought hash    KEYS[3] orders hash (order.lua,
--         prepended, finds an order's record in it)
-- KEYS[4] events stream    KEYS[5] deadlines zset
-- ARGV[1] now, unix µs, or "" to read the Redis server's clock (TIME)
-- ARGV[2] the most orders to expire in this call
-- ARGV[3] channel to announce the stock that came back on, "" for none
-- ARGV[4] sale id, for the announcement "<sale>|<sku>,<sku>..."
--
-- Reply:
--   {0, n, more, id1, id2, ...}  expired the n orders id1..idn; more is 1
--                      if orders past their deadline are left (call again)
--   {2}                the sale is not in Redis (nothing to expire here)
--   {0, 0, 0}          also: the sale is fenced (the database sells it)
--   {8, field, n, id1, ...}  a stored value is not what the engine wrote;
--                      the orders listed before it were expired, it and the
--                      ones after it were not
-- Each order is checked in full before any write of it.

if redis.call('EXISTS', KEYS[1]) == 0 then return {2} end
-- While the database sells the sale (degraded mode, fence.lua) its
-- reservations wait: the recovery brings Redis back to the database first.
if redis.call('HEXISTS', KEYS[1], 'fenced') == 1 then return {0, 0, 0} end
local now_ms = math.floor(script_now(ARGV[1]) / 1000)
local max = tonumber(ARGV[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now_ms, 'LIMIT', 0, max + 1)
local more = 0
if #due > max then
  more = 1
  due[#due] = nil
end
local at = string.format('%d', now_ms)
local done, skus, seen = {}, {}, {}

local function expire(order_id)
  local record, group, rs, re = order_get(KEYS[3], order_id)
  if not record then
    redis.call('ZREM', KEYS[5], order_id) -- nothing to expire (never here)
    return
  end
  local status, user, created, lines, key = string.match(record, '^([pc])|([^|]*)|(%d+)|([^|]*)|(.*)$')
  if not status or lines == '' then return 'orders:' .. order_id end
  for line in string.gmatch(lines .. ',', '([^,]*),') do
    if not string.match(line, '^[^=]+=%d+$') then return 'orders:' .. order_id end
  end
  if status == 'c' then
    redis.call('ZREM', KEYS[5], order_id) -- cancelled already
    return
  end
  local sku, qty, rem, held = {}, {}, {}, {}
  for s, q in string.gmatch(lines, '([^,=]+)=(%d+)') do
    local i = #sku + 1
    sku[i], qty[i] = s, tonumber(q)
    rem[i] = int(redis.call('HGET', KEYS[1], 'r:' .. s))
    if not rem[i] then return 'r:' .. s end
    held[i] = int(redis.call('HGET', KEYS[2], user .. '|' .. s) or '0')
    if not held[i] then return 'bought:' .. user .. '|' .. s end
    if rem[i] == -1 and not int(redis.call('HGET', KEYS[1], 's:' .. s) or '0') then
      return 's:' .. s
    end
    if not int(redis.call('HGET', KEYS[1], 'a:' .. s) or '0') then return 'a:' .. s end
  end
  -- Every check of this order passed: write, the event first.
  redis.call('XADD', KEYS[4], '*', 'type', 'expired', 'order', order_id, 'user', user,
    'items', lines, 'key', key, 'at', at, 'created', created)
  for i = 1, #sku do
    if rem[i] == -1 then
      redis.call('HINCRBY', KEYS[1], 's:' .. sku[i], string.format('%d', -qty[i]))
    else
      redis.call('HINCRBY', KEYS[1], 'r:' .. sku[i], string.format('%d', qty[i]))
    end
    redis.call('HINCRBY', KEYS[1], 'a:' .. sku[i], string.format('%d', -qty[i]))
    if held[i] - qty[i] > 0 then
      redis.call('HINCRBY', KEYS[2], user .. '|' .. sku[i], string.format('%d', -qty[i]))
    else
      redis.call('HDEL', KEYS[2], user .. '|' .. sku[i])
    end
    if not seen[sku[i]] then
      seen[sku[i]] = true
      skus[#skus + 1] = sku[i]
    end
  end
  order_put(KEYS[3], order_id, 'c|' .. user .. '|' .. created .. '|' .. lines .. '|' .. key, group, rs, re)
  redis.call('ZREM', KEYS[5], order_id)
  done[#done + 1] = order_id
end

local bad
for _, id in ipairs(due) do
  bad = expire(id)
  if bad then break end
end
if #skus > 0 and ARGV[3] ~= '' then
  redis.call('PUBLISH', ARGV[3], ARGV[4] .. '|' .. table.concat(skus, ','))
end
local reply
if bad then
  reply = {8, bad, #done}
else
  reply = {0, #done, more}
end
for _, id in ipairs(done) do reply[#reply + 1] = id end
return reply
