-- order.lua (prepended to buy.lua, cancel.lua, pay.lua and expire.lua): where
-- an order's record lives in the sale's orders hash.
--
-- The hash's field for an order is its group: the order id without its last
-- four characters, its tail (order_group, order_tail; orderGroup in
-- record.go). The engine gives the buys of one call order ids of one group,
-- so that a call that buys n orders writes one field, not n. A group's value
-- is its orders as "<tail>|<order record>" (record.go), joined by newlines,
-- in the order they were made: the text of a call's stream entry of bought
-- orders (events.go) with the group left out of each line, which saves
-- every order the length of its group in Redis. A value written before the
-- engine left the group out may have lines "<order id>|<order record>"
-- too; a line's id is its tail exactly when it is four characters long (an
-- order id is longer: "<sale id>.<ULID>"). No order id, record or
-- idempotency key holds a newline, and no order id holds '|', so an order
-- is found by its tail, or its id, at the start of a line.
--
-- A sale stored before the engine kept its orders by group may still hold
-- an order's record under a field of the order id itself (its value the
-- record alone): order_get finds it there when its group has none, and
-- order_put writes it back there. (buy.lua looks there too for a buy under
-- an order id its caller chose: the engine's own are of a group.)

local function order_group(id) return string.sub(id, 1, -5) end
local function order_tail(id) return string.sub(id, -4) end

-- line_of(v, head): the record of the line of v that starts with head (an
-- order's "<tail>|" or "<order id>|"), and its first and last place in v;
-- false if no line does.
local function line_of(v, head)
  local p = 1
  while true do
    local i, j = string.find(v, head, p, true)
    if not i then return false end
    if i == 1 or string.byte(v, i - 1) == 10 then
      local e = string.find(v, '\n', j + 1, true)
      e = e and e - 1 or #v
      return string.sub(v, j + 1, e), j + 1, e
    end
    p = i + 1
  end
end

-- order_in(v, id): the record of order id in the group value v (false for
-- none, or for no value), and the first and last place of the record in v:
-- of its first line, by tail or by id (as recordIn reads it, record.go).
local function order_in(v, id)
  if not v then return false end
  local rec, s, e = line_of(v, order_tail(id) .. '|')
  local rec2, s2, e2 = line_of(v, id .. '|')
  if rec2 and (not rec or s2 < s) then return rec2, s2, e2 end
  return rec, s, e
end

-- group_sound(g, v): whether every line of group g's value v is an order
-- of g: "<4 characters but '|'>|<record>" or "<g><4 characters but
-- '|'>|<record>".
local function group_sound(g, v)
  for line in string.gmatch(v .. '\n', '([^\n]*)\n') do
    local t = 0
    if string.byte(line, 5) ~= 124 then
      if string.sub(line, 1, #g) ~= g then return false end
      t = #g
    end
    if string.byte(line, t + 5) ~= 124 or string.find(string.sub(line, t + 1, t + 4), '|', 1, true) then
      return false
    end
  end
  return true
end

-- order_get(key, id): the record of order id in the orders hash key (false
-- for none), then what order_put needs to change it: its group's value and
-- the record's place in it (no place: a field of its own).
local function order_get(key, id)
  local v = redis.call('HGET', key, order_group(id))
  local rec, s, e = order_in(v, id)
  if rec then return rec, v, s, e end
  return redis.call('HGET', key, id), false, nil, nil
end

-- order_put(key, id, record, v, s, e): writes record as order id's, where
-- order_get found it: at s..e of its group's value v, or in its own field.
local function order_put(key, id, record, v, s, e)
  if not s then
    redis.call('HSET', key, id, record)
    return
  end
  redis.call('HSET', key, order_group(id), string.sub(v, 1, s - 1) .. record .. string.sub(v, e + 1))
end
