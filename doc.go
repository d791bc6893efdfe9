// Package seckill sells a limited stock to a crowd in seconds, on Redis and
// a database: it never oversells, never loses or duplicates an order, and
// never lets one buyer take more than their share.
//
// A [System] is the whole of it in one value: the inventory in Redis (one
// Lua script per atomic step), the order pipeline that stores every
// accepted buy in the database (PostgreSQL, or an embedded SQLite file),
// the expiry of unpaid reservations, the archiver that gives a closed
// sale's Redis memory back, reconciliation, degraded mode (the database
// sells while Redis is away) and, if asked, the HTTP API of the contract in
// docs/api.md. [Open] starts it; its methods are the domain's verbs:
//
//	sys, err := seckill.Open(ctx, seckill.Config{Redis: rdb, DatabaseURL: "postgres://..."})
//	_, err = sys.CreateSale(ctx, seckill.Sale{ID: "launch", PerUserLimit: 1,
//		Items: []seckill.Item{{SKU: "phone", Stock: 100}}})
//	rc, err := sys.Buy(ctx, seckill.BuyRequest{SaleID: "launch", UserID: "alice",
//		Lines: []seckill.Line{{SKU: "phone", Qty: 1}}})
//
// Every business outcome is an error to test with [errors.Is] (ErrSoldOut,
// ErrLimitExceeded, ErrSaleNotActive, ...) or [errors.As] (*SoldOutError
// names the short skus). Several Systems (processes, machines) may share one
// Redis and one database: they are one fleet, and every guarantee holds
// across them.
//
// # Stability
//
// The names this package and package lock export are the public API,
// listed in api/seckill.txt; a change to them is deliberate and noted in
// CHANGELOG.md. Everything under internal/ may change at any time. The HTTP
// contract (docs/api.md) is stable in its names, paths, codes and fields.
package seckill
