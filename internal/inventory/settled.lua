-- settled.lua: whether a sale's stream is settled, as Lua functions
-- prepended to the scripts that act only on a settled sale (repair.lua,
-- archive.lua) and to commit.lua (which compares stream ids).
--
-- Settled means: every consumer group of the stream has been delivered every
-- entry and has acknowledged them all (no pending entries); a stream with
-- entries and no group has undelivered entries. A missing stream is settled
-- at "0-0". What counts is the entries the stream holds, not its last
-- generated id: a rebuilt sale's stream has its last id raised to a floor
-- by an entry added and deleted at once (commit.lua), which no group is
-- ever delivered.
--
-- stream_last(key) is the stream's last generated id ("0-0": no stream).
-- stream_unsettled(key, last) is nil when the stream at key (whose last
-- generated id is last) is settled, else the reply {14, group, pending,
-- delivered, last}: the group has pending entries, or was delivered only up
-- to entry `delivered` (group "": the stream has no group).

local function parse(id)
  local ms, seq = string.match(id or '', '^(%d+)-?(%d*)$')
  if not ms then return 0, 0 end
  return tonumber(ms), tonumber(seq) or 0
end

-- Is stream id a newer than b?
local function newer(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am > bm or (am == bm and as > bs)
end

-- field -> value of a flat reply {f1, v1, f2, v2, ...}
local function fields(flat)
  local t = {}
  for i = 1, #flat - 1, 2 do t[flat[i]] = flat[i + 1] end
  return t
end

local function stream_last(key)
  if redis.call('EXISTS', key) == 0 then return '0-0' end
  local last = fields(redis.call('XINFO', 'STREAM', key))['last-generated-id']
  if not last or last == '' then return '0-0' end
  return last
end

local function stream_unsettled(key, last)
  if redis.call('EXISTS', key) == 0 then return nil end
  local groups = redis.call('XINFO', 'GROUPS', key)
  if #groups == 0 and redis.call('XLEN', key) > 0 then return {14, '', 0, '0-0', last} end
  for _, g in ipairs(groups) do
    local info = fields(g)
    local pending, delivered = tonumber(info['pending']) or 0, info['last-delivered-id']
    if not delivered or delivered == '' then delivered = '0-0' end
    if pending > 0 or (newer(last, delivered) and
        #redis.call('XRANGE', key, '(' .. delivered, '+', 'COUNT', 1) > 0) then
      return {14, info['name'], pending, delivered, last}
    end
  end
  return nil
end
