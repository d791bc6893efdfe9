// Package lock is a distributed lock on Redis that does not lie about
// whether it is held.
//
// A Locker hands out a Lease per successful Acquire. The lock is a key set
// with SET NX PX to a random 128-bit owner token; renewing (extend.lua) and
// releasing (release.lua) compare the token first, so a holder whose lock
// expired can neither renew nor delete its successor's lock. Each acquire
// also takes the next number of the lock's counter, in the same script: the
// lease's fencing token (Fence).
//
// While the lease is held a watchdog renews the lock every TTL/3. The
// lease's Context is cancelled the moment the lease stops being sure it
// holds the lock: when a renewal finds another owner or no lock, or when
// renewals have failed until the TTL, counted on this process's monotonic
// clock from the start of the last confirmed acquire or renewal and less a
// drift allowance, could have run out in Redis. Do the protected work under
// lease.Context() and stop when it is done.
//
//	lease, err := locker.Acquire(ctx, "restock:sale42", lock.WithTTL(5*time.Second))
//	if err != nil { ... }                 // errors.Is(err, lock.ErrNotAcquired): someone else has it
//	defer lease.Release(ctx)
//	err = restock(lease.Context(), lease.Fence())
//
// # What it guarantees
//
//   - Mutual exclusion in time: a lease is valid until Until(), and as long
//     as the Redis data survives and clock rates differ by less than the
//     drift allowance, the validity windows of two leases of one lock never
//     overlap. Context is cancelled at Until() at the latest (give or take
//     this process's scheduling delays), earlier when a renewal finds the
//     lock gone, with a cause wrapping ErrLost.
//   - A lease never becomes valid again once it has ended, and a renewal
//     never revives an expired lock.
//   - Release, Extend and the watchdog never touch another owner's lock.
//     Release reports ErrLost when the lock had already expired or changed
//     hands, so the caller learns its critical section may have overlapped.
//   - Fences of one lock increase strictly from holder to holder (single
//     Redis; for quorum mode see below).
//
// # What it does not guarantee
//
//   - Process pauses. A holder can be stopped after it last checked its
//     context — a GC pause, SIGSTOP, a VM migration, a slow page fault, or
//     simply a write already on the wire — and act when the lock has long
//     passed to someone else. Nothing on the holder's side can prevent that;
//     only the protected resource can, by refusing stale fences.
//   - Clock jumps. Deadlines are measured on the local monotonic clock, so
//     a wall-clock step (NTP, an operator) does not affect them. But Redis
//     expires keys by its own clock: if Redis's clock runs fast (or is
//     stepped forward) beyond the drift allowance, the key can vanish before
//     the lease notices. On Linux the monotonic clock also stops while the
//     machine is suspended, while the TTL on a remote Redis keeps running.
//   - Failover. A single Redis with replicas replicates asynchronously: a
//     lock (and fence increments) acknowledged by the master can be missing
//     on the replica that is promoted. The new master then grants the lock
//     again while the old holder still runs, and can issue a fence number
//     that was already issued. The same happens when a Redis without fsync'd
//     persistence restarts, or when the counter key is evicted (use
//     noeviction or a volatile-* policy: the counter has no TTL).
//   - Fairness or ordering among waiters. WithRetry polls with jitter.
//
// seckill therefore does not rely on this lock for correctness. Stock is
// kept right by the atomicity of the Lua scripts that change it; the lock
// only keeps concurrent jobs (a rebuild, a restock, a reconcile) from
// duplicating work, and whatever it protects checks the fence: a Guard, the
// same check inside the Lua script that writes (read the highest fence
// first, refuse before any write), or a SQL condition (Fence.Admits).
//
// There is deliberately no injectable clock: a lease's deadlines must run on
// real time, the time that expires keys in Redis. The tests use real Redis
// servers and short TTLs instead.
//
// # Quorum mode (Redlock)
//
// NewQuorum spreads a lock over N independent Redis nodes. Acquire sends
// the acquire script to all of them at once and succeeds when a majority
// granted it before its validity time, TTL - elapsed - (TTL*DriftFactor +
// 2ms), ran out; otherwise it releases on every node, including ones that
// answer late. Renewals and releases need a majority too; a lease is lost
// at once when so many nodes deny holding it that no majority can be left.
// This tolerates a minority of nodes being down, hung or unreachable. It
// still assumes bounded clock drift, and nodes that keep their data across
// restarts (appendfsync always) or stay down for longer than a TTL: a node
// that granted the lock and comes back empty can help a second client to a
// majority. And it does nothing against process pauses: fencing is still
// needed.
//
// Fences in quorum mode come from N independent counters. A lease's fence
// is the highest of the counters of the nodes that granted it. Taken alone
// that would not be monotonic (counters 10, 0, 0: one holder gets
// max(11, 1) = 11 from nodes 1 and 2, the next max(2, 1) = 2 from nodes 2
// and 3), so before Acquire returns it raises the counter on the granting
// nodes to the fence (extend.lua with a floor, only while they still hold
// the lock for this owner), and requires a majority to confirm. Any later
// holder's majority shares a node with that majority, whose counter it can
// only increment after this holder's lock there expired, so its fence is
// larger. What this does not give: fences are not consecutive (gaps are
// normal), and a node that loses its counter (restart without persistence,
// eviction) breaks the argument the same way it breaks the lock itself.
// Fences of a quorum Locker and of a single-node Locker for the same lock
// name are unrelated; do not mix the two.
//
// # Why not redsync
//
// github.com/go-redsync/redsync/v4 (v4.18.1, read from its source) does
// Redlock well: 128-bit random values, compare-and-delete and
// compare-and-extend scripts, a drift factor, release on every node after a
// failed attempt. But its acquire is a plain SETNX and nothing in it issues
// a fencing token, so a paused holder cannot be fenced off; and it has no
// watchdog: a Mutex is renewed only when the caller calls Extend, and no
// context is cancelled when the lock is lost (Until returns a time to be
// checked by hand). Its WithSetNXOnExtend option even re-creates an expired
// lock on extend, which hides a loss. Those two missing pieces are most of
// this package, so it is its own small implementation of the same algorithm.
package lock
