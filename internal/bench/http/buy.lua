-- buy.lua: a wrk script that POSTs one-unit buys, each request as the next
-- of a crowd of buyers, round robin.
--
-- Environment: TOKENS  a file with one buyer JWT per line (seckill token --count N)
--              SKU     the sku to buy (default A)
-- The URL's path is the sale's orders endpoint: http://host:port/v1/sales/<sale>/orders
-- Each of wrk's threads starts at its own offset into the crowd.

local tokens, next_token = {}, 0
local threads = 0

function setup(thread)
  thread:set("offset", threads)
  threads = threads + 1
end

function init(args)
  for line in io.lines(os.getenv("TOKENS")) do
    if line ~= "" then tokens[#tokens + 1] = line end
  end
  if #tokens == 0 then error("no tokens in " .. tostring(os.getenv("TOKENS"))) end
  next_token = (offset or 0) * math.floor(#tokens / 2)
  wrk.method = "POST"
  wrk.body = '{"items":[{"sku":"' .. (os.getenv("SKU") or "A") .. '","qty":1}]}'
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  next_token = next_token % #tokens + 1
  wrk.headers["Authorization"] = "Bearer " .. tokens[next_token]
  return wrk.format()
end
