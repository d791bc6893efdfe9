-- move.lua: one half of a move of unsold units of a limited item from one
-- sale to another (the segments of a hot item: see Engine.Move). The two
-- sales may live on different nodes, so a move is made of calls that are
-- each atomic on their own sale, tied together by the move id, and each
-- half is journaled as a "moved" event in its own sale's stream:
--
--   out   takes up to the units asked for, never more than are left, and
--         records the move as pending in the sale hash
--   in    adds the units to the other sale, once per move id: the sale hash
--         keeps the move id for as long as the sale lives
--   done  marks a pending out as finished, once its in has been applied
--
-- The records are fields of the sale hash ("m:<move id>"), so a sale
-- rebuilt from the system of record gets them back with the rest of it
-- (Snapshot.Moves): a move its in half reached before the rebuild is not
-- applied again, and one still pending can still be finished.
--
-- A process that dies between the halves leaves the out pending: its units
-- are in neither sale (nothing can oversell) until Engine.FinishMoves
-- applies the in.
--
-- KEYS[1] sale hash, whose field "m:<move id>" records a move:
--         "<state>|<peer sale>|<sku>|<units>", state "out" (pending),
--         "done" or "in"
-- KEYS[2] events stream
-- ARGV[1] now, unix ms    ARGV[2] the half: "out", "in" or "done"
-- ARGV[3] move id    ARGV[4] the other sale of the move    ARGV[5] sku
-- ARGV[6] units: out, the most to take; in, the units taken (> 0)
-- ARGV[7] channel to announce stock coming back on ("" for none)
-- ARGV[8] the announcement, "<sale>|<sku>"
--
-- Reply, the first element is the outcome:
--   {0, units, remaining}  applied: the units this half moved (out: what it
--                          took, 0 when nothing was left, and then nothing
--                          is recorded); the item's remaining after it
--   {1, units, remaining}  this half was applied before: the units it
--                          moved then; the item's remaining now
--   {2}                    the sale is not in Redis: rebuild it, call again
--   {3, 'fenced'}          the database sells the sale (degraded mode)
--   {4, sku}               the sale has no such sku
--   {8, field}             a stored value is not what the engine wrote
--   {9, 'unlimited'}       an unlimited item has nothing to move
-- done replies {0, 0, 0} (or {2}) whatever the record says.

local half, id, peer, sku, units = ARGV[2], 'm:' .. ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])

if redis.call('EXISTS', KEYS[1]) == 0 then return {2} end
if half == 'done' then
  local rec = redis.call('HGET', KEYS[1], id)
  if rec and string.sub(rec, 1, 4) == 'out|' then
    redis.call('HSET', KEYS[1], id, 'done|' .. string.sub(rec, 5))
  end
  return {0, 0, 0}
end

local v = redis.call('HMGET', KEYS[1], 'r:' .. sku, 't:' .. sku, 'fenced')
if not v[1] then return {4, sku} end
-- int (int.lua, prepended): HINCRBY below must not fail on what tonumber takes.
local rem, stocked = int(v[1]), int(v[2])
if not rem then return {8, 'r:' .. sku} end
if not stocked then return {8, 't:' .. sku} end

local rec = redis.call('HGET', KEYS[1], id)
if rec then
  local n = tonumber(string.match(rec, '|(%d+)$'))
  if not n then return {8, id} end
  return {1, n, rem}
end
if v[3] then return {3, 'fenced'} end
if rem == -1 then return {9, 'unlimited'} end

local state, delta = 'in', units
if half == 'out' then
  state = 'out'
  if units > rem then units = rem end
  if units <= 0 then return {0, 0, rem} end
  delta = -units
end

-- The event is the first write: if it fails, nothing has been written.
redis.call('XADD', KEYS[2], '*', 'type', 'moved', 'sku', sku, 'qty', string.format('%d', delta),
  'move', ARGV[3], 'peer', peer, 'remaining', string.format('%d', rem + delta), 'at', ARGV[1])
redis.call('HINCRBY', KEYS[1], 't:' .. sku, delta)
local remaining = redis.call('HINCRBY', KEYS[1], 'r:' .. sku, delta)
redis.call('HSET', KEYS[1], id, state .. '|' .. peer .. '|' .. sku .. '|' .. string.format('%d', units))
if state == 'in' and ARGV[7] ~= '' then redis.call('PUBLISH', ARGV[7], ARGV[8]) end
return {0, units, remaining}
