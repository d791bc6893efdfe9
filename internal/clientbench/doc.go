// Package clientbench measures Redis client libraries on the engine's hot
// call, so that the choice of client rests on numbers rather than on claims.
//
// The call measured is the one a buy costs: EVALSHA of the buy script
// (gcra.ClockLua, gcra.TakeLua, internal/inventory/int.lua, order.lua and buy.lua, exactly the source
// inventory loads) against a real Redis, in two shapes:
//
//   - BenchmarkOneBuyPerCall: 256 goroutines, each call a batch of one buy.
//     This is where a client's auto-pipelining (rueidis by default, go-redis's
//     experimental Client.AutoPipeline) can help: many small concurrent calls
//     on few connections.
//   - BenchmarkBatchedCall: 8 goroutines, each call a batch of 32 buys, the
//     shape the engine's coalescing (internal/inventory/coalesce.go) already produces
//     under load, so calls are ~1/30 of buys whichever client sends them.
//
// Each benchmark checks its own work: every reply code is 0 and the sale's
// remaining stock fell by exactly the number of buys made. It reports
// buys/s, the client process's CPU time per buy (getrusage, which is fairer
// than wall time on a shared, noisy machine), and from INFO deltas the
// server's evalsha usec_per_call and whole-server CPU per buy, so client-side
// cost can be told from server-side cost.
//
// It lives in internal/ and only in _test.go files so that rueidis is a
// test-only dependency: nothing the service links imports it. Run with
//
//	go test -run '^$' -bench . -benchtime 100000x -count 3 ./internal/clientbench/
//
// against Redis at 127.0.0.1:6379 (SECKILL_CLIENTBENCH_ADDR overrides); the
// benchmarks skip when it is not reachable. Every key is under a hash tag of
// its own and deleted afterwards.
package clientbench
