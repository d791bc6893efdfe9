package service

import (
	"context"
	"errors"
	"hash/fnv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/segment"
)

// streamMarks reads each sale's change marker, in one pipeline (one round
// trip per node): its stream's last generated id, which every script that
// changes the sale moves (each appends its event to the stream in the same
// script), and which trimming the stream does not move back. A sale whose
// stream is missing has the marker "". An error is the pipeline's: a sale
// whose marker could not be read then counts as changed.
func streamMarks(ctx context.Context, rdb redis.UniversalClient, streams pipeline.StreamKeys, saleIDs []string) ([]string, error) {
	cmds := make([]*redis.XInfoStreamCmd, len(saleIDs))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range saleIDs {
			cmds[i] = p.XInfoStream(ctx, streams.EventsKey(id))
		}
		return nil
	})
	var reply redis.Error
	if err != nil && !errors.As(err, &reply) {
		return nil, err
	}
	marks := make([]string, len(saleIDs))
	for i, c := range cmds {
		info, err := c.Result()
		switch {
		case err == nil:
			marks[i] = info.LastGeneratedID
		case strings.Contains(err.Error(), "no such key"):
		default:
			return nil, err
		}
	}
	return marks, nil
}

// markReader reads stream marks (see streamMarks) for the sampler and the
// reconcile loop, knowing which sales moved lately: reading every live
// sale's mark every second (the sampler) or every pass (the loop) was most
// of what idle live sales cost, ten thousand of them ten thousand
// XINFO STREAM a second, each reply carrying the stream's first and last
// entries. Each caller reads the marks of the sales that may have moved
// and of the ones it has other reasons to look at; a sale whose mark it
// does not read counts as unmoved until its turn comes (see sampleSales and
// reconciler.choose).
type markReader struct {
	rdb     redis.UniversalClient
	streams pipeline.StreamKeys
	active  map[string]bool
	known   bool // active says which sales moved lately: the consumer runs here
}

// marks returns a markReader that knows the sales moved lately as the
// order consumer says now, and the siblings of the segments among them.
func (s *Service) marks(ctx context.Context) markReader {
	m := markReader{rdb: s.rdb, streams: s.eng}
	if s.orders == nil {
		return m
	}
	active := s.orders.Active()
	m.active, m.known = make(map[string]bool, len(active)), true
	for _, id := range active {
		m.active[id] = true
	}
	// A segment that moved lately may have taken units from its siblings
	// or given them some (segment.Seller's refills of a buyer's home
	// segment, its rebalances): each half of a move appends to its own
	// segment's stream, and only the bought segment is told to the
	// consumer (Heard). Its siblings count as moved lately too, or the
	// sale would show the units a refill took twice (in the home segment
	// and, as last sampled, in the one they came from) until the giver's
	// mark came round: about 20 s among 10,000 live sales.
	for _, id := range active {
		if segment.ParentOf(id) == "" {
			continue
		}
		parent, err := s.router.Parent(ctx, id)
		if err != nil || parent == "" {
			continue
		}
		segs, _ := s.router.Segments(ctx, parent) // known: Parent has just read them
		for _, seg := range segs {
			m.active[seg] = true
		}
	}
	return m
}

// moving reports whether sale id may have moved lately as far as this
// instance knows: its order consumer read entries of its stream, or this
// process appended to it (or to a sibling segment's, see marks) (a buy, a cancel, a pay, an expiry, a restock, a
// pause, a close: each is announced to the consumer with Wake), within the
// last 10 s (pipeline.Options.QuietAfter). Without a consumer nothing is
// known, and every sale may have. A sale another instance changed, whose
// entries another instance's consumer read, is not moving here.
func (m markReader) moving(id string) bool {
	return !m.known || m.active[id]
}

// unknownMark is the mark of a sale whose mark could not be read: it
// equals no mark read, so the sale counts as moved.
const unknownMark = "?"

// read reads the marks of the sales ids, in one pipeline: sale -> mark,
// unknownMark for every one of them when the read fails (err says why).
func (m markReader) read(ctx context.Context, ids []string) (map[string]string, error) {
	out := make(map[string]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	marks, err := streamMarks(ctx, m.rdb, m.streams, ids)
	for i, id := range ids {
		if err != nil {
			out[id] = unknownMark
		} else {
			out[id] = marks[i]
		}
	}
	return out, err
}

// fnv32 spreads sale ids over a period.
func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}
