package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// backlog is where the consumer group stands in a stream, read in one
// MULTI so the parts agree.
type backlog struct {
	lastID        string // newest entry of the stream, "" if empty
	lastGenerated string // newest entry it ever had, trimmed or not; "" if none
	groupExists   bool
	lastDelivered string // newest entry handed to a consumer
	// undelivered is the entries after lastDelivered (XINFO GROUPS lag),
	// -1 when Redis cannot tell (an entry deleted past the group's
	// position, such as a rebuild's floor or buy.lua's rare XDEL, while the
	// stream's last id is not an entry's, as after an entry of several
	// orders: see buy.lua)
	undelivered   int64
	pending       int64 // delivered, not acknowledged
	lowestPending string
	// minNeeded is the oldest entry not yet acknowledged (pending, or not
	// delivered yet); everything older may be trimmed. "" if none is known.
	minNeeded string
}

func readBacklog(ctx context.Context, rdb redis.UniversalClient, key string) (backlog, error) {
	bs, err := readBacklogs(ctx, rdb, []string{key})
	if err != nil {
		return backlog{}, err
	}
	return bs[0], nil
}

// readBacklogs reads where the group stands in each of several streams,
// each stream's parts read atomically: in transactions of up to
// backlogsPerTx streams on a single node, one per stream on a Cluster (a
// transaction cannot span slots there).
func readBacklogs(ctx context.Context, rdb redis.UniversalClient, keys []string) ([]backlog, error) {
	// A transaction runs without interruption: keep each short, so that
	// buys do not queue behind one over a thousand streams.
	per := backlogsPerTx
	if _, ok := rdb.(*redis.Client); !ok {
		per = 1
	}
	if len(keys) > per {
		out := make([]backlog, 0, len(keys))
		for chunk := range slices.Chunk(keys, per) {
			b, err := readBacklogs(ctx, rdb, chunk)
			if err != nil {
				return nil, err
			}
			out = append(out, b...)
		}
		return out, nil
	}
	type parts struct {
		last    *redis.XMessageSliceCmd
		info    *redis.XInfoStreamCmd
		groups  *redis.XInfoGroupsCmd
		pending *redis.XPendingCmd
	}
	cmds := make([]parts, len(keys))
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range keys {
			cmds[i] = parts{p.XRevRangeN(ctx, key, "+", "-", 1), p.XInfoStream(ctx, key), p.XInfoGroups(ctx, key), p.XPending(ctx, key, Group)}
		}
		return nil
	})
	var reply redis.Error // a reply error (no such key, no group) is read per command below
	if err != nil && !errors.As(err, &reply) && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]backlog, len(keys))
	for i, c := range cmds {
		out[i] = backlogOf(c.last, c.info, c.groups, c.pending)
	}
	return out, nil
}

const backlogsPerTx = 64

func backlogOf(last *redis.XMessageSliceCmd, info *redis.XInfoStreamCmd, groups *redis.XInfoGroupsCmd, pending *redis.XPendingCmd) backlog {
	var b backlog
	if msgs, err := last.Result(); err == nil && len(msgs) > 0 {
		b.lastID = msgs[0].ID
	}
	if in, err := info.Result(); err == nil && in.LastGeneratedID != "0-0" {
		b.lastGenerated = in.LastGeneratedID
	}
	if gs, err := groups.Result(); err == nil {
		for _, g := range gs {
			if g.Name == Group {
				b.groupExists, b.lastDelivered, b.undelivered = true, g.LastDeliveredID, g.Lag
			}
		}
	}
	if b.groupExists {
		if p, err := pending.Result(); err == nil {
			b.pending, b.lowestPending = p.Count, p.Lower
		}
	}
	switch {
	case !b.groupExists:
	case b.pending > 0:
		b.minNeeded = b.lowestPending
	case b.lastDelivered != "":
		b.minNeeded = nextID(b.lastDelivered)
	}
	return b
}

// inFlight reports whether some entry of the stream is not yet applied.
func (b backlog) inFlight() bool {
	if b.lastID == "" {
		return false
	}
	return !b.groupExists || b.pending > 0 || inventory.CompareEventIDs(b.lastDelivered, b.lastID) < 0
}

// Applied returns the newest event of the sale's stream that the database
// holds, in the sense of inventory.Snapshot.EventsApplied: the stream's
// last generated id when every entry is acknowledged (its entries may be
// trimmed already), "" when some are still in flight (or the stream never
// had an entry). Read it before reading the database.
func Applied(ctx context.Context, rdb redis.UniversalClient, keys StreamKeys, saleID string) (string, error) {
	b, err := readBacklog(ctx, rdb, keys.EventsKey(saleID))
	if err != nil {
		return "", err
	}
	if b.inFlight() {
		return "", nil
	}
	return b.lastGenerated, nil
}

// InFlight returns the sale's events that are in the stream but not yet
// in the database: delivered and not acknowledged, or not delivered yet.
func InFlight(ctx context.Context, rdb redis.UniversalClient, keys StreamKeys, saleID string) ([]inventory.Event, error) {
	key := keys.EventsKey(saleID)
	b, err := readBacklog(ctx, rdb, key)
	if err != nil || !b.inFlight() {
		return nil, err
	}
	from := "-"
	if b.minNeeded != "" {
		from = b.minNeeded
	}
	msgs, err := rdb.XRange(ctx, key, from, "+").Result()
	if err != nil {
		return nil, fmt.Errorf("read stream of sale %s: %w", saleID, err)
	}
	pendingIDs := map[string]bool{}
	if b.pending > 0 {
		ps, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: Group, Start: "-", End: "+", Count: b.pending}).Result()
		if err != nil {
			return nil, fmt.Errorf("read pending entries of sale %s: %w", saleID, err)
		}
		for _, p := range ps {
			pendingIDs[p.ID] = true
		}
	}
	return inFlightOf(saleID, b, msgs, pendingIDs), nil
}

// inFlightOf picks the entries of msgs not yet applied, as of b: pending
// (pendingIDs), or after the group's last delivered entry. Entries that do
// not parse are left out: dead letters to be, they never reach the
// database.
func inFlightOf(saleID string, b backlog, msgs []redis.XMessage, pendingIDs map[string]bool) []inventory.Event {
	var out []inventory.Event
	for _, m := range msgs {
		if b.groupExists && inventory.CompareEventIDs(m.ID, b.lastDelivered) <= 0 && !pendingIDs[m.ID] {
			continue // acknowledged, not trimmed yet
		}
		out, _ = inventory.ParseEntry(out, saleID, m) // every order of an entry of several
	}
	return out
}

// Stream is a sale's stream at one instant: Position is its last generated
// id ("" if it never had an entry), InFlight its events not yet applied.
type Stream struct {
	Position string
	InFlight []inventory.Event
}

// maxPendingRead bounds the pending entries QueueInFlight lists: far more
// than any consumer holds at once (it reads in batches).
const maxPendingRead = 1 << 20

// QueueInFlight queues on p, a transaction (MULTI) of the caller's, the
// reads of the sale's stream that InFlight makes, so that they are of the
// instant of the caller's other reads in it; read returns the outcome once
// the transaction has run. It reads every entry of the stream: the
// consumer trims acknowledged ones, so they are about the backlog.
func QueueInFlight(ctx context.Context, p redis.Pipeliner, keys StreamKeys, saleID string) (read func() (Stream, error)) {
	key := keys.EventsKey(saleID)
	last, info, groups, pending := p.XRevRangeN(ctx, key, "+", "-", 1), p.XInfoStream(ctx, key), p.XInfoGroups(ctx, key), p.XPending(ctx, key, Group)
	all := p.XRange(ctx, key, "-", "+")
	ext := p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: Group, Start: "-", End: "+", Count: maxPendingRead})
	return func() (Stream, error) {
		b := backlogOf(last, info, groups, pending)
		s := Stream{Position: b.lastGenerated}
		if !b.inFlight() {
			return s, nil
		}
		msgs, err := all.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return Stream{}, fmt.Errorf("read stream of sale %s: %w", saleID, err)
		}
		pendingIDs := map[string]bool{}
		if b.pending > 0 {
			ps, err := ext.Result()
			if err != nil {
				return Stream{}, fmt.Errorf("read pending entries of sale %s: %w", saleID, err)
			}
			if int64(len(ps)) < b.pending {
				return Stream{}, fmt.Errorf("read pending entries of sale %s: %d listed of %d", saleID, len(ps), b.pending)
			}
			for _, p := range ps {
				pendingIDs[p.ID] = true
			}
		}
		s.InFlight = inFlightOf(saleID, b, msgs, pendingIDs)
		return s, nil
	}
}

// Lag is how far the database is behind a sale's order stream.
type Lag struct {
	// Entries is how many stream entries are not yet stored: delivered and
	// not acknowledged, plus not yet delivered. The second part is Redis's
	// own count (XINFO GROUPS lag, Redis 7), counted here when Redis cannot
	// tell (up to a bound: see AtLeast); the embedded server overstates it (it counts every entry of the
	// stream). An entry is a buy.lua call's bought orders (one or more: see
	// inventory.ParseEntry) or one other event: InFlight has the orders.
	Entries int64
	// Oldest is when the oldest entry not yet stored was added; zero if
	// every entry is stored.
	Oldest time.Time
	// AtLeast: Entries is a lower bound. Where Redis cannot tell the lag,
	// ReadLags counts the undelivered entries by reading them, lagRead at
	// most (the live view looks every second, and the database may be
	// down for an hour with millions of entries waiting).
	AtLeast bool
}

// lagRead bounds the undelivered entries ReadLags reads to count them
// when Redis cannot tell the lag (see Lag.AtLeast): each may hold a buy
// script call's orders, a hundred or more.
var lagRead int64 = 100

// ReadLag reads how far the database is behind the sale's stream.
func ReadLag(ctx context.Context, rdb redis.UniversalClient, keys StreamKeys, saleID string) (Lag, error) {
	lags, err := ReadLags(ctx, rdb, keys, []string{saleID})
	if err != nil {
		return Lag{}, err
	}
	return lags[0], nil
}

// ReadLags reads how far the database is behind each of the sales'
// streams: one transaction per node (per sale, on a Cluster), then one
// pipeline for the sales whose undelivered entries alone are behind.
func ReadLags(ctx context.Context, rdb redis.UniversalClient, streams StreamKeys, saleIDs []string) ([]Lag, error) {
	keys := make([]string, len(saleIDs))
	for i, id := range saleIDs {
		keys[i] = streams.EventsKey(id)
	}
	bs, err := readBacklogs(ctx, rdb, keys)
	if err != nil {
		return nil, err
	}
	lags := make([]Lag, len(saleIDs))
	oldest := make([]*redis.XMessageSliceCmd, len(saleIDs))
	lengths := make([]*redis.IntCmd, len(saleIDs))
	unknown := make([]*redis.XMessageSliceCmd, len(saleIDs)) // the undelivered entries, when Redis cannot count them
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range bs {
			if !b.inFlight() {
				continue
			}
			lags[i] = Lag{Entries: b.pending + max(b.undelivered, 0)}
			from := "-" // the undelivered entries
			if b.lastDelivered != "" {
				from = "(" + b.lastDelivered
			}
			if b.groupExists && b.undelivered < 0 {
				unknown[i] = p.XRangeN(ctx, keys[i], from, "+", lagRead+1)
			}
			if b.pending > 0 {
				ms, _ := inventory.SplitEventID(b.lowestPending)
				lags[i].Oldest = time.UnixMilli(int64(ms))
				continue
			}
			oldest[i] = p.XRangeN(ctx, keys[i], from, "+", 1)
			if !b.groupExists {
				lengths[i] = p.XLen(ctx, keys[i])
			}
		}
		return nil
	})
	var reply redis.Error
	if err != nil && !errors.As(err, &reply) {
		return nil, fmt.Errorf("read streams: %w", err)
	}
	for i, cmd := range unknown {
		if cmd == nil {
			continue
		}
		msgs, err := cmd.Result()
		if err != nil {
			return nil, fmt.Errorf("read stream of sale %s: %w", saleIDs[i], err)
		}
		n := int64(len(msgs))
		if n > lagRead {
			n, lags[i].AtLeast = lagRead, true
		}
		lags[i].Entries += n
	}
	for i, cmd := range oldest {
		if cmd == nil {
			continue
		}
		msgs, err := cmd.Result()
		if err != nil {
			return nil, fmt.Errorf("read stream of sale %s: %w", saleIDs[i], err)
		}
		if len(msgs) == 0 {
			lags[i] = Lag{}
			continue
		}
		ms, _ := inventory.SplitEventID(msgs[0].ID)
		lags[i].Oldest = time.UnixMilli(int64(ms))
		if lengths[i] != nil {
			lags[i].Entries, _ = lengths[i].Result()
		}
	}
	return lags, nil
}

// nextID is the smallest stream id after id.
func nextID(id string) string {
	m, s := inventory.SplitEventID(id)
	return strconv.FormatUint(m, 10) + "-" + strconv.FormatUint(s+1, 10)
}
