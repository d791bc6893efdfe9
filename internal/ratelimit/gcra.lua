-- gcra.lua: a hit of cost n on a GCRA bucket (see gcra_take.lua and
-- clock.lua in internal/gcra, prepended to this source): allowed if the
-- bucket holds n tokens, and takes them; a refused hit takes nothing.
--
-- KEYS[1] the TAT
-- ARGV[1] now, µs, or "" for the Redis server's clock (see clock.lua)
-- ARGV[2] rate    ARGV[3] period, µs
-- ARGV[4] capacity (burst+1)    ARGV[5] cost n (1..capacity)
--
-- Reply, the first element is the outcome:
--   {0, debt}   allowed; the debt after this hit, in units
--   {1, debt}   refused; the debt now (unchanged), in units
--   {8}         the stored TAT is not what the limiter wrote; nothing written

local ok, debt, state, ttl = gcra_take(redis.call('GET', KEYS[1]), script_now(ARGV[1]), tonumber(ARGV[2]),
  tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
if ok == nil then return {8} end
if not ok then return {1, debt} end
-- Kept until the TAT has passed; then no state is the same as this state.
redis.call('SET', KEYS[1], state, 'PX', string.format('%d', ttl))
return {0, debt}
