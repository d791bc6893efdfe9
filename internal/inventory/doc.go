// Package inventory is seckill's domain: the engine that sells a sale's
// limited stock on Redis without overselling, without losing or duplicating
// an order, and without letting a buyer past the per-user limit.
//
// Every operation that changes stock (CreateSale, Buy, Cancel, Restock,
// Move, Pause, Repair) is one Lua script (one .lua file each, its KEYS, ARGV
// and replies stated on top), atomic on one sale: it checks everything
// before its first write, and appends the change's event to the sale's
// stream in the same script, so the stream is the exact journal the order
// pipeline and reconciliation read. Replies are decoded in one place
// (reply.go) into receipts and typed errors (ErrSoldOut, ErrLimitExceeded,
// ...). Every key of a sale is built in keys.go and shares the hash tag
// {prefix:sale}, so every script runs on Redis Cluster. The engine takes the
// narrowest client interface it needs (Client), so callers bring their own
// single-node, Sentinel or Cluster client.
package inventory
