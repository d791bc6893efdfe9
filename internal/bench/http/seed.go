// Package httpbench holds what the HTTP buy path's measurements share
// that is not Go: the seeds' one-item Lua buy (seed000.lua), the yardstick
// of Redis's cost per buy, which run.sh and redis-instructions.sh read from
// the file and `seckill bench --cost` runs from this package.
package httpbench

import _ "embed"

// SeedScript is seed000.lua, the seeds' one-item buy: KEYS[1] the stock
// counter, KEYS[2] the set of buyers, ARGV[1] the quantity, ARGV[2] the
// buyer; it replies the stock left after the buy, -1 when there is not
// enough, -2 when the buyer bought already.
//
//go:embed seed000.lua
var SeedScript string
