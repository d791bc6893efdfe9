-- discard.lua: remove a sale a create made, while nothing has touched it
-- since: the undo of a create of several sales as one (Engine.CreateSales)
-- when another of them, or the caller's record of them, failed. Only the
-- create that made the sale removes it (its token), and only while its
-- stream holds its created event alone: a sale anything happened to (a
-- buy, a pause) is somebody's, and stays.
--
-- KEYS[1] sale hash    KEYS[2] events stream
-- ARGV[1] the token of the create (create.lua's ARGV[7])
--
-- Reply: {0} removed, or not there; {10} another create's sale: kept;
-- {12} this create's, touched since: kept.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
if redis.call('HGET', KEYS[1], 'created') ~= ARGV[1] then return {10} end
if redis.call('XLEN', KEYS[2]) ~= 1 then return {12} end
redis.call('UNLINK', KEYS[1], KEYS[2])
return {0}
