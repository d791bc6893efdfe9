-- int.lua: int(v), prepended to the scripts that read stored counters
-- (buy, cancel, restock, move).
--
-- int(v) returns v as a number if it is an integer as the engine writes
-- them (an optional '-', then digits), else nil. tonumber alone takes
-- "9.0", "1e3", " 9" or "0x9", on which HINCRBY then fails: a script must
-- find such a value before its first write, not half way through.
local function int(v)
  if v and string.match(v, '^%-?%d+$') then return tonumber(v) end
  return nil
end
