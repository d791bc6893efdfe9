-- seed000.lua: the one-item deduction script of design note 000
-- (../shared/seeds/000_*), verbatim in logic: the yardstick that
-- internal/bench/http/run.sh and the README measure against with redis-benchmark.
-- KEYS[1] stock counter  KEYS[2] set of buyers  ARGV[1] qty  ARGV[2] user id
-- Reply: remaining after the buy, -1 not enough stock, -2 bought already.
local stockKey = KEYS[1]
local boughtKey = KEYS[2]
local quantity = tonumber(ARGV[1])
local userId = ARGV[2]
if redis.call('SISMEMBER', boughtKey, userId) == 1 then
return -2
end
local remain = tonumber(redis.call('GET', stockKey))
if not remain or remain < quantity then
return -1
end
redis.call('DECRBY', stockKey, quantity)
redis.call('SADD', boughtKey, userId)
return remain - quantity
