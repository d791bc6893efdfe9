-- pay.lua: pay an order awaiting payment (a reservation of a sale with a
-- payment timeout). Exactly one of pay and expiry (expire.lua) wins: both
-- run atomically and judge the deadline by the same clock (TIME): a pay
-- wins while now < pay_by, an expiry takes an order once pay_by <= now;
-- whichever runs first removes the order from the deadlines.
--
-- KEYS[1] sale hash    KEYS[2] orders hash (order.lua, prepended)
-- KEYS[3] deadlines zset
-- KEYS[4] paid hash    KEYS[5] events stream
-- ARGV[1] now, unix µs, or "" to read the Redis server's clock (TIME)
-- ARGV[2] order id
-- ARGV[3] user id the order must belong to, "" for any (an operator)
-- ARGV[4] payment ref (1-128 printable characters, checked by the caller)
--
-- Reply, the first element is the outcome:
--   {0, record, at}   paid now, at time at (unix ms); a "paid" event was
--                     appended (fields: order, user, items, key, created,
--                     ref, at)
--   {1, record}       already paid with this very ref: nothing changed
--   {2}               the sale is not in Redis: rebuild it, call again
--   {4}               no such order (or not this user's)
--   {8, field}        a stored value is not what the engine wrote
--   {16}              already paid with another ref: nothing changed
--   {17, why}         closed: "cancelled" (cancelled before pay_by) or
--                     "expired" (pay_by has passed: the expiry took it,
--                     or will; or it was cancelled, and its time is up
--                     too)
--   {18}              the sale has no payment step
-- record is the order's record (see record.go).

local order_id, owner, ref = ARGV[2], ARGV[3], ARGV[4]
if redis.call('EXISTS', KEYS[1]) == 0 then return {2} end
local record = order_get(KEYS[2], order_id)
if not record then return {4} end
local status, user, created, lines, key = string.match(record, '^([pc])|([^|]*)|(%d+)|([^|]*)|(.*)$')
if not status or lines == '' then return {8, 'orders:' .. order_id} end
if owner ~= '' and owner ~= user then return {4} end

local paid = redis.call('HGET', KEYS[4], order_id)
if paid then
  if paid == ref then return {1, record} end
  return {16}
end
local pay = redis.call('HGET', KEYS[1], 'pay')
if not pay or pay == '0' then return {18} end
local now_ms = math.floor(script_now(ARGV[1]) / 1000)
local deadline = redis.call('ZSCORE', KEYS[3], order_id)
if status == 'c' or not deadline then
  -- off the deadlines: pay_by is its time + the timeout (see buy.lua)
  if tonumber(created) + tonumber(pay) <= now_ms then return {17, 'expired'} end
  return {17, 'cancelled'}
end
if tonumber(deadline) <= now_ms then return {17, 'expired'} end

for sku in string.gmatch(lines, '([^,=]+)=%d+') do
  if not int(redis.call('HGET', KEYS[1], 'a:' .. sku) or '0') then return {8, 'a:' .. sku} end
end

-- Every check passed: write; the event first (see cancel.lua).
local at = string.format('%d', now_ms)
redis.call('XADD', KEYS[5], '*', 'type', 'paid', 'order', order_id, 'user', user,
  'items', lines, 'key', key, 'created', created, 'ref', ref, 'at', at)
redis.call('ZREM', KEYS[3], order_id)
redis.call('HSET', KEYS[4], order_id, ref)
-- its units no longer held by an awaiting order (see buy.lua)
for sku, q in string.gmatch(lines, '([^,=]+)=(%d+)') do
  redis.call('HINCRBY', KEYS[1], 'a:' .. sku, '-' .. q)
end
return {0, record, now_ms}
