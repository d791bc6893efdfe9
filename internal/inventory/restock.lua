-- restock.lua: add units to one limited item and journal it, once per
-- restock id: a call retried after a network error does not add twice.
--
-- KEYS[1] sale hash    KEYS[2] events stream
-- KEYS[3] marker of this restock id: the remaining right after it (kept a day)
-- ARGV[1] now, unix ms    ARGV[2] sku    ARGV[3] units to add (> 0)
-- ARGV[4] the most units an item may have been stocked with in total
-- ARGV[5] channel to announce the stock that came back on, "" for none
-- ARGV[6] the announcement, "<sale>|<sku>"
-- ARGV[7] now, unix µs, or "" to read the Redis server's clock (TIME): an
--         ended sale takes no restock (script_now, clock.lua, prepended)
--
-- Reply, the first element is the outcome:
--   {0, remaining}   added; remaining after it
--   {1, remaining}   this restock id was applied already; remaining right
--                    after it was (the marker keeps it)
--   {2}              the sale is not in Redis: rebuild it, call again
--   {3, "ended"}     the sale has ended (closed, or past its end)
--   {4, sku}         the sale has no such sku
--   {8, field}       a stored value is not what the engine wrote
--   {9, reason}      refused: "unlimited" item, or "too_much" in total

local sku, qty = ARGV[2], tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 0 then return {2} end
local v = redis.call('HMGET', KEYS[1], 'r:' .. sku, 't:' .. sku, 'end')
if not v[1] then return {4, sku} end
-- int (int.lua, prepended): HINCRBY below must not fail on what tonumber takes.
local rem, stocked = int(v[1]), int(v[2])
if not rem then return {8, 'r:' .. sku} end
if not stocked then return {8, 't:' .. sku} end
local applied = redis.call('GET', KEYS[3])
if applied then return {1, tonumber(applied) or rem} end
local stop = int(v[3] or '0')
if not stop then return {8, 'end'} end
if stop ~= 0 and stop <= math.floor(script_now(ARGV[7]) / 1000) then return {3, 'ended'} end
if rem == -1 then return {9, 'unlimited'} end
if stocked + qty > tonumber(ARGV[4]) then return {9, 'too_much'} end

-- Redis before 7 formats Lua numbers handed to redis.call with 14
-- significant digits: format a counter that may be larger exactly.
-- The event is the first write: XADD is the one write whose key no check
-- above has read, so if it fails, nothing has been written.
redis.call('XADD', KEYS[2], '*', 'type', 'restocked', 'sku', sku, 'qty', ARGV[3],
  'remaining', string.format('%d', rem + qty), 'at', ARGV[1])
redis.call('HINCRBY', KEYS[1], 't:' .. sku, qty)
local remaining = redis.call('HINCRBY', KEYS[1], 'r:' .. sku, qty)
redis.call('SET', KEYS[3], string.format('%d', remaining), 'EX', 86400)
if ARGV[5] ~= '' then redis.call('PUBLISH', ARGV[5], ARGV[6]) end
return {0, remaining}
