-- int.lua: int(v), prepended to the scripts that read stored counters
-- (buy, cancel, restock, move, pay, expire).
--
-- int(v) returns v as a number if it is an integer as the engine writes
-- them ('0', or an optional '-' then digits with no leading zero: the
-- only forms Redis's own integer parser takes, so HINCRBY never fails on a
-- value int accepted) and Lua's doubles hold it exactly (|v| < 2^53, which
-- every counter the engine keeps is: see maxStocked), else nil. "01",
-- "-0" or "007" are corrupt, not numbers. tonumber alone takes "9.0",
-- "1e3", " 9" or "0x9", on which HINCRBY then fails; digits past 2^53 are
-- inexact in Lua and past int64 make HINCRBY fail too (and miniredis's
-- tonumber gives nil for them): a script must find such a value before its
-- first write, not half way through.
local function int(v)
  if v == '0' then return 0 elseif v == '1' then return 1 end -- the commonest, unparsed
  if not (v and string.match(v, '^%-?[1-9]%d*$')) then return nil end
  local n = tonumber(v)
  if not n or n >= 9007199254740992 or n <= -9007199254740992 then return nil end
  return n
end
