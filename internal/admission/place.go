package admission

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/luascript"
)

// A place is read without the room's script: the user's state (its
// bucket's field, the bucket found as room.lua finds it), the room's head
// and draw size, in one pipeline of plain reads; the facts every place of the room shares (sold out, the
// admissions of the last 10 s) from what the room's last calls read
// (roomFacts), or with the place when those are older than factsMaxAge.
// Place answers as room.lua's place operation does (placeByScript).

// roomFacts are what every place of a room shares, as one call of the
// script read them (its <facts>).
type roomFacts struct {
	soldOut bool  // sold out when read (the end, or no unit left nor held)
	recent  int64 // admissions over the 10 whole seconds before nowMs
	saleEnd int64 // the sale's end, unix ms; 0 none; -1: no sale hash
	roomEnd int64 // the room's end, unix ms; 0 none
	nowMs   int64 // the script's clock when read
	ver     int64 // the room's count of facts reads when read: the higher, the newer
	readAt  time.Time
}

// soldOutAt is sold_out of room.lua at nowMs: the end is now's, the stock
// and the admissions out the facts'.
func (f *roomFacts) soldOutAt(nowMs int64) bool {
	if f.saleEnd < 0 {
		return false
	}
	return f.soldOut || (f.saleEnd > 0 && nowMs >= f.saleEnd) || (f.roomEnd > 0 && nowMs >= f.roomEnd)
}

// factsOf decodes <facts>.
func factsOf(v any) (*roomFacts, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 6 {
		return nil, fmt.Errorf("admission: unexpected facts %v", v)
	}
	return &roomFacts{soldOut: num(a[0]) == 1, recent: num(a[1]), saleEnd: num(a[2]), roomEnd: num(a[3]),
		nowMs: num(a[4]), ver: num(a[5]), readAt: time.Now()}, nil
}

// keepFacts keeps the facts v of a call of the sale's room, unless newer
// ones are kept.
func (r *Rooms) keepFacts(saleID string, v any) error {
	f, err := factsOf(v)
	if err != nil {
		return err
	}
	r.keep(saleID, f)
	return nil
}

// keep keeps the facts f of the sale's room, unless newer ones are kept.
func (r *Rooms) keep(saleID string, f *roomFacts) {
	for {
		old, loaded := r.facts.LoadOrStore(saleID, f)
		if !loaded {
			return
		}
		if o := old.(*roomFacts); o.ver > f.ver || r.facts.CompareAndSwap(saleID, o, f) {
			return
		}
	}
}

// Stale tells the rooms that the sale's room's facts may have changed
// (a buy took the last units of an item): the next place read of the room
// reads them afresh, so that the buyers in line read sold_out at once.
func (r *Rooms) Stale(saleID string) { r.facts.Delete(saleID) }

// cachedFacts are the sale's room's facts as last read; nil if none.
func (r *Rooms) cachedFacts(saleID string) *roomFacts {
	if f, ok := r.facts.Load(saleID); ok {
		return f.(*roomFacts)
	}
	return nil
}

// nowMs is the script's clock now, in unix ms: the test's clock, or
// Redis's as f read it moved on by this process's clock since (a
// millisecond or so off, a round trip's half), or this process's without
// facts.
func (r *Rooms) nowMs(f *roomFacts) int64 {
	switch {
	case r.clock != nil:
		return r.clock().UnixMilli()
	case f != nil:
		return f.nowMs + time.Since(f.readAt).Milliseconds()
	}
	return time.Now().UnixMilli()
}

// bucketCount is the sale's room's bucket count (nb): kept once read.
// ErrNoRoom without a room.
func (r *Rooms) bucketCount(ctx context.Context, saleID string) (int64, error) {
	if nb, ok := r.buckets.Load(saleID); ok {
		return nb.(int64), nil
	}
	v, err := r.rdb.HGet(ctx, r.key(saleID, "room:cfg"), "nb").Result()
	if errors.Is(err, redis.Nil) {
		return 0, ErrNoRoom
	}
	if err != nil {
		return 0, fmt.Errorf("admission: the buckets of sale %s: %w", saleID, err)
	}
	nb, err := strconv.ParseInt(v, 10, 64)
	if err != nil || nb < 1 {
		return 0, fmt.Errorf("admission: the buckets of sale %s: %q", saleID, v)
	}
	r.buckets.Store(saleID, nb)
	return nb, nil
}

// bucketKey is the key of user's bucket among nb, as room.lua's bucket:
// the first 8 hex digits of SHA1(user), mod nb.
func (r *Rooms) bucketKey(saleID, user string, nb int64) string {
	sum := sha1.Sum([]byte(user))
	n := int64(binary.BigEndian.Uint32(sum[:4])) % nb
	return r.key(saleID, "room:b:") + strconv.FormatInt(n, 10)
}

// Place reads user's place (ErrNotJoined if the user never joined): plain
// reads, and the room's facts as SetFactsMaxAge allows. Concurrent reads
// of a room (and Checks) go to Redis together, as one pipeline (batcher).
func (r *Rooms) Place(ctx context.Context, saleID, user string) (Place, error) {
	s, err := r.reads.do(ctx, saleID, user)
	if err != nil {
		return Place{}, err
	}
	if !s.joined {
		return Place{}, ErrNotJoined
	}
	return placeOfState(s.st, s.head, s.dsize, r.nowMs(s.facts), s.facts)
}

// stateRead is what one user's place is made of: its state ("" never
// joined), the room's head and draw size, and the room's facts.
type stateRead struct {
	joined      bool // the user has a state (st, which may be corrupt)
	st          string
	head, dsize int64
	facts       *roomFacts
}

// readStates reads the states of users in the sale's room: one round trip
// of plain reads (and the room's facts if those kept are older than
// factsMaxAge). ErrNoRoom without a room.
func (r *Rooms) readStates(ctx context.Context, saleID string, users []string) ([]stateRead, error) {
	for attempt := 0; ; attempt++ {
		nb, err := r.bucketCount(ctx, saleID)
		if err != nil {
			return nil, err
		}
		f := r.cachedFacts(saleID)
		stale := f == nil || r.factsMaxAge <= 0 || time.Since(f.readAt) >= r.factsMaxAge
		pipe := r.rdb.Pipeline()
		cfgCmd := pipe.HMGet(ctx, r.key(saleID, "room:cfg"), "nb", "head", "dsize", "fso", "frec", "fnow", "fver")
		stCmds := make([]*redis.StringCmd, len(users))
		for i, u := range users {
			stCmds[i] = pipe.HGet(ctx, r.bucketKey(saleID, u, nb), u)
		}
		var factsCmd *redis.Cmd
		if stale {
			factsCmd = pipe.EvalSha(ctx, roomScript.SHA, r.keys(saleID), "facts", r.scriptNow())
		}
		_, _ = pipe.Exec(ctx) // each command's error is its own
		cfg, err := cfgCmd.Result()
		if err != nil {
			return nil, fmt.Errorf("admission: places of sale %s: %w", saleID, err)
		}
		if cfg[0] == nil {
			r.buckets.Delete(saleID)
			return nil, ErrNoRoom
		}
		var counts [3]int64
		for i := range counts {
			s, _ := cfg[i].(string)
			if counts[i], err = strconv.ParseInt(s, 10, 64); err != nil {
				return nil, fmt.Errorf("admission: places of sale %s: unexpected settings %v", saleID, cfg)
			}
		}
		if counts[0] != nb {
			// Not the room the bucket count was kept of (made again
			// otherwise): read again with its own.
			r.buckets.Store(saleID, counts[0])
			if attempt == 0 {
				continue
			}
			return nil, fmt.Errorf("admission: places of sale %s: its bucket count changes", saleID)
		}
		if stale {
			if f, err = r.readFacts(ctx, saleID, factsCmd); err != nil {
				return nil, err
			}
		} else if nf := newerFacts(f, cfg[3:]); nf != nil {
			// The room's last call read newer facts (another instance's
			// join, say): a read is never older than it.
			r.keep(saleID, nf)
			f = nf
		}
		out := make([]stateRead, len(users))
		for i := range users {
			st, err := stCmds[i].Result()
			joined := err == nil
			if err != nil && !errors.Is(err, redis.Nil) {
				return nil, fmt.Errorf("admission: places of sale %s: %w", saleID, err)
			}
			out[i] = stateRead{joined: joined, st: st, head: counts[1], dsize: counts[2], facts: f}
		}
		return out, nil
	}
}

// newerFacts are f with the facts the room's settings hold (v: "fso",
// "frec", "fnow", "fver", as the room's last call that read them wrote
// them) when those are newer; nil when they are not (or none are written).
func newerFacts(f *roomFacts, v []any) *roomFacts {
	var n [4]int64
	for i := range n {
		s, ok := v[i].(string)
		if !ok {
			return nil
		}
		var err error
		if n[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return nil
		}
	}
	if n[3] <= f.ver {
		return nil
	}
	nf := *f
	nf.soldOut, nf.recent, nf.nowMs, nf.ver = n[0] == 1, n[1], n[2], n[3]
	// Read when the clock f keeps said fnow: the same clock on.
	nf.readAt = f.readAt.Add(time.Duration(n[2]-f.nowMs) * time.Millisecond)
	return &nf
}

// readFacts is the facts of the sale's room that c, a facts call sent in a
// pipeline, read (sent again alone if the node did not have the script),
// kept for the next reads.
func (r *Rooms) readFacts(ctx context.Context, saleID string, c *redis.Cmd) (*roomFacts, error) {
	var reply []any
	var err error
	if luascript.IsNoScript(c.Err()) {
		reply, err = r.run(ctx, saleID, "facts")
	} else {
		reply, err = r.reply(saleID, "facts", c.Val(), c.Err())
	}
	if err != nil {
		return nil, err
	}
	if len(reply) != 2 {
		return nil, fmt.Errorf("admission: unexpected facts reply %v", reply)
	}
	if err := r.keepFacts(saleID, reply[1]); err != nil {
		return nil, err
	}
	return factsOf(reply[1])
}

// placeOfState is room.lua's place of a user in state st (see its top),
// with the room's head and draw size, at nowMs, with the room's facts f.
func placeOfState(st string, head, dsize, nowMs int64, f *roomFacts) (Place, error) {
	ps, err := parseState(st)
	if err != nil {
		return Place{}, err
	}
	p := Place{JoinedAt: time.UnixMilli(ps.joined), InDraw: ps.inDraw}
	switch ps.kind {
	case 'd':
		p.Status, p.InDraw = Drawing, true
		if f.soldOutAt(nowMs) {
			p.Status = SoldOut
		}
	case 'w':
		p.Status, p.InDraw = Waiting, ps.rank <= dsize
		if f.soldOutAt(nowMs) {
			p.Status = SoldOut
			break
		}
		p.Position = ps.rank - head
		p.Ahead = p.Position - 1
		p.RecentRate = float64(f.recent) / 10
	case 'a':
		p.Status = Admitted
		if nowMs >= ps.until {
			p.Status = Lapsed
		} else {
			p.Nonce, p.AdmittedUntil = ps.nonce, time.UnixMilli(ps.until)
		}
	case 'u':
		p.Status, p.OrderID = Used, ps.order
	case 'l':
		p.Status = Lapsed
	}
	return p, nil
}

// state is a user's state string parsed (room.lua's top has the forms):
// kind 'd', 'w', 'a', 'u' or 'l', and the fields its kind has.
type state struct {
	kind                byte
	joined, rank, until int64
	nonce, order        string
	inDraw              bool
}

// parseState parses st exactly as room.lua writes it; anything else is
// an error (a corrupt value is never read as some place).
func parseState(st string) (state, error) {
	bad := func() (state, error) { return state{}, fmt.Errorf("admission: unexpected state %q", st) }
	if st == "" {
		return bad()
	}
	n := map[byte]int{'d': 1, 'w': 2, 'a': 4, 'u': 4, 'l': 3}[st[0]]
	if n == 0 {
		return bad()
	}
	fields := strings.SplitN(st[1:], ":", n) // a used state's order id may hold ':'
	if len(fields) != n {
		return bad()
	}
	ps := state{kind: st[0]}
	num := func(s string, out *int64) bool {
		v, err := strconv.ParseUint(s, 10, 63)
		*out = int64(v)
		return err == nil
	}
	hexOK := func(s string, empty bool) bool {
		if s == "" {
			return empty
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
		return true
	}
	flag := func(s string) bool { ps.inDraw = s == "1"; return s == "0" || s == "1" }
	if !num(fields[0], &ps.joined) {
		return bad()
	}
	ok := true
	switch ps.kind {
	case 'w': // w<rank>:<joined>
		ps.joined = 0
		ok = num(fields[0], &ps.rank) && num(fields[1], &ps.joined)
	case 'a': // a<joined>:<nonce>:<until>:<in draw>
		ps.nonce = fields[1]
		ok = hexOK(fields[1], false) && num(fields[2], &ps.until) && flag(fields[3])
	case 'u': // u<joined>:<nonce>:<in draw>:<order id>
		ps.nonce, ps.order = fields[1], fields[3]
		ok = hexOK(fields[1], true) && flag(fields[2])
	case 'l': // l<joined>:<nonce>:<in draw>
		ps.nonce = fields[1]
		ok = hexOK(fields[1], true) && flag(fields[2])
	}
	if !ok {
		return bad()
	}
	return ps, nil
}
