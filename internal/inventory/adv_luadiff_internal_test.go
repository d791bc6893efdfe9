package inventory

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/gcra"
	"github.com/seckill/seckill/internal/luascript"
	"github.com/seckill/seckill/internal/redistest"
)

// refBuyScript is buy.lua at the commit ADV_LUA_DIFF_REF names, assembled
// as buyScript is (the same prepended files), or a skip when it names none
// (or git or the commit is not at hand). The test is for a change to
// buy.lua that means to change no behaviour (a refactor, a cheaper way to
// do the same): run it against the commit before the change, which every
// reply and everything stored must then agree with, byte for byte:
//
//	ADV_LUA_DIFF_REF=<commit> go test -count=1 -run TestAdvLuaDiffBuyAgainstRef -v ./internal/inventory/
//
// (the inline buy loop and the fewer tables per call were checked so
// against the script before them, 3,000 cases on Redis and on miniredis).
func refBuyScript(t *testing.T) *luascript.Script {
	ref := os.Getenv("ADV_LUA_DIFF_REF")
	if ref == "" {
		t.Skip("ADV_LUA_DIFF_REF names no reference commit to compare buy.lua with")
	}
	out, err := exec.Command("git", "show", ref+":internal/inventory/buy.lua").Output()
	if err != nil {
		t.Skipf("the reference buy.lua (git show %s): %v", ref, err)
	}
	return luascript.New("buyref", gcra.ClockLua+"\n"+gcra.TakeLua+"\n"+intSrc+"\n"+orderSrc+"\n"+string(out))
}

// TestAdvLuaDiffBuyAgainstRef: buy.lua and its reference (buyRefCommit)
// run the same random calls on two copies of the same random state (two
// sales of one prefix, every key of each seeded alike): their replies
// and every key of the sale after each call must be the same. The state
// has the corrupt values of each hash the script reads, resends of earlier
// calls' order ids (in groups and in fields of their own), idempotency
// keys naming others' and missing orders, spent tokens, throttle states in
// the three windows read, a room with live, lapsed, used and corrupt
// admissions, paused, ended, fenced and unknown sales; the calls have
// shared and inline shapes, several groups of order ids, both stream modes
// and streams whose next seq has 16 digits or passes 2^64. The clock is
// fixed (ARGV[1]) and each stream's last id is set past the server's
// clock, so that '*' gives both copies the same ids. On Redis and the
// embedded server; ADV_LUA_DIFF_CASES cases (default 600 and 200),
// ADV_LUA_DIFF_SEED to replay one seed.
func TestAdvLuaDiffBuyAgainstRef(t *testing.T) {
	ref := refBuyScript(t)
	for _, srv := range redistest.SingleBackends() {
		t.Run(srv.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := srv.Client(t)
			e := New(rdb, Options{Prefix: redistest.Prefix(t, rdb)})
			cases := 600
			if srv.Name == "miniredis" {
				cases = 200
			}
			if testing.Short() {
				cases /= 10
			}
			if s := os.Getenv("ADV_LUA_DIFF_CASES"); s != "" {
				cases, _ = strconv.Atoi(s)
			}
			seed := uint64(time.Now().UnixNano())
			if s := os.Getenv("ADV_LUA_DIFF_SEED"); s != "" {
				seed, _ = strconv.ParseUint(s, 10, 64)
			}
			t.Logf("seed %d (ADV_LUA_DIFF_SEED), %d cases", seed, cases)
			calls, codes := 0, map[any]int{}
			for c := 0; c < cases && !t.Failed(); c++ {
				rng := rand.New(rand.NewPCG(seed, uint64(c)))
				w := newDiffWorld(rng, srv.Name == "miniredis")
				ka, kb := e.keys(fmt.Sprint("a", c)), e.keys(fmt.Sprint("b", c))
				w.seedInto(ctx, t, rdb, c, ka, kb)
				for n := range 1 + rng.IntN(4) {
					args := w.call(rng)
					calls++
					ra, res := runDiff(ctx, rdb, ref, ka.buy(), args)
					rb, _ := runDiff(ctx, rdb, buyScript, kb.buy(), args)
					if ra != rb {
						t.Errorf("seed %d case %d call %d: replies differ\nref %s\nnew %s\nargs %v", seed, c, n, ra, rb, args)
						break
					}
					countCodes(codes, res)
					codes["distinct calls"] += w.distinct
					w.distinct = 0
					da, db := dumpDiff(ctx, t, rdb, ka.tag, w.keys()), dumpDiff(ctx, t, rdb, kb.tag, w.keys())
					if d := diffLines(da, db); d != "" {
						t.Errorf("seed %d case %d call %d: states differ (- ref, + new):\n%s\nreply %s\nargs %v", seed, c, n, d, ra, args)
						break
					}
				}
			}
			t.Logf("%d calls; buys by code: %v", calls, codes)
		})
	}
}

var scriptLine = regexp.MustCompile(`(user_script|f_[0-9a-f]+)?:[0-9]+:`)

// seedInto writes the world's starting state into the keys of each of
// ks (case c, for the failure's message).
func (w *diffWorld) seedInto(ctx context.Context, t *testing.T, rdb redis.UniversalClient, c int, ks ...saleKeys) {
	t.Helper()
	for _, k := range ks {
		for _, op := range w.seed {
			args := append([]any{op[0], k.tag + op[1].(string)}, op[2:]...)
			if err := rdb.Do(ctx, args...).Err(); err != nil {
				t.Fatalf("case %d seed %v: %v", c, args, err)
			}
		}
	}
}

// runDiff runs s and returns its reply, or its error with the script's
// name and line numbers taken out, as text.
func runDiff(ctx context.Context, rdb redis.UniversalClient, s *luascript.Script, keys []string, args []any) (string, any) {
	res, _, err := luascript.Run(ctx, rdb, s, keys, args...)
	if err != nil {
		return "error " + scriptLine.ReplaceAllString(err.Error(), ""), err
	}
	return fmt.Sprint(res), res
}

// countCodes adds each buy's code in reply (buy.lua's, flat) to codes.
func countCodes(codes map[any]int, reply any) {
	r, ok := reply.([]any)
	if !ok || len(r) < 2 {
		codes[fmt.Sprint("call ", reply)]++
		return
	}
	bought := 0
	for i := 1; i+1 < len(r); {
		k, _ := r[i].(int64)
		codes[r[i+1]]++
		if r[i+1] == int64(0) {
			bought++
		}
		i += 1 + int(k)
	}
	codes[fmt.Sprint("calls buying ", min(bought, 2))]++
}

// dumpDiff lists every key of names under tag (by name) with its type,
// value and whether it expires, one line per field, sorted. (Not a SCAN:
// the shared Redis has many keys.)
func dumpDiff(ctx context.Context, t *testing.T, rdb redis.UniversalClient, tag string, names []string) []string {
	var out []string
	for _, name := range names {
		key := tag + name
		ty := rdb.Type(ctx, key).Val()
		if ty == "none" {
			continue
		}
		ttl := rdb.PTTL(ctx, key).Val()
		exp := "persist"
		if ttl > 0 {
			// both copies were written in the same fixed-clock call:
			// their expiries differ by the time between the calls only
			exp = fmt.Sprint("expires~", (ttl+30*time.Second)/time.Minute)
			// (and no longer: the next calls' copies must not differ by
			// a key one of them lost to the clock)
			rdb.Persist(ctx, key)
		}
		out = append(out, name+" "+ty+" "+exp)
		switch ty {
		case "string":
			out = append(out, name+" = "+rdb.Get(ctx, key).Val())
		case "hash":
			for f, v := range rdb.HGetAll(ctx, key).Val() {
				out = append(out, name+" ["+f+"] = "+v)
			}
		case "zset":
			for _, z := range rdb.ZRangeWithScores(ctx, key, 0, -1).Val() {
				out = append(out, fmt.Sprintf("%s [%v] = %v", name, z.Member, z.Score))
			}
		case "stream":
			for _, m := range rdb.XRange(ctx, key, "-", "+").Val() {
				out = append(out, fmt.Sprintf("%s %s %v", name, m.ID, byWholeIDs(m.Values)))
			}
			if info, err := rdb.XInfoStream(ctx, key).Result(); err == nil {
				out = append(out, name+" last "+info.LastGeneratedID)
			}
		}
	}
	slices.Sort(out)
	return out
}

// byWholeIDs is an entry's fields with the orders of an entry by tail
// ("group", "lines") as an entry by order id has them ("orders", or
// "bought" for one order): the same orders either way (ParseEntry),
// written by scripts that sent their ids differently.
func byWholeIDs(values map[string]any) map[string]any {
	lines, ok := values[fieldLines].(string)
	if !ok {
		return values
	}
	group, _ := values[fieldGroup].(string)
	out := map[string]any{}
	for f, v := range values {
		if f != fieldLines && f != fieldGroup {
			out[f] = v
		}
	}
	whole := strings.Split(lines, "\n")
	for i := range whole {
		whole[i] = group + whole[i]
	}
	if len(whole) == 1 {
		out[fieldBought] = whole[0]
	} else {
		out[fieldOrders] = strings.Join(whole, "\n")
	}
	return out
}

// diffLines is the lines only one of a and b has (sorted lists), or "".
func diffLines(a, b []string) string {
	var d []string
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i] < b[j]:
			d = append(d, "- "+a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			d = append(d, "+ "+b[j])
			j++
		default:
			i, j = i+1, j+1
		}
	}
	return strings.Join(d, "\n")
}

// diffOrder is an order of the world: one seeded, or one a call sent.
type diffOrder struct{ id, user, lines, key string }

// diffWorld is one case: the seed of a sale's keys (each op a command,
// the key's suffix after the sale's tag, then its arguments) and what the
// calls draw from.
type diffWorld struct {
	seed      [][]any
	nowMS     int64
	nb        int
	nonces    map[string]string // a user's live admission's nonce
	until     string
	orders    []diffOrder
	throttles [][4]int64 // rate, period µs, capacity, window ms
	calls     int
	distinct  int             // calls with the distinct flag
	tat       map[string]bool // the throttle hashes a call may touch
}

// keys are the suffixes of every key a call may touch or the seed wrote.
func (w *diffWorld) keys() []string {
	names := []string{":sale", ":bought", ":orders", ":idem", ":events", ":deadlines", ":room:live", ":room:cfg",
		":room:b:0", ":room:b:1", ":room:b:2", ":ptoken:t1", ":ptoken:t2", ":ptoken:t3", ":ptoken:ab"}
	for k := range w.tat {
		names = append(names, k)
	}
	return names
}

// touch notes the throttle hashes a call at now may read or write.
func (w *diffWorld) touch() {
	for _, th := range w.throttles {
		for d := int64(-3); d <= 3; d++ {
			w.tat[fmt.Sprintf(":tat:%d:%d", th[3], w.nowMS/th[3]+d)] = true
		}
	}
}

var diffUsers = []string{"u0", "u1", "u2", "u3", "u4", "u5"}
var diffSkus = []string{"A", "B", "C", "D", "E"} // D unknown, E unlimited

// pick returns one of xs.
func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

// chance is true with probability p.
func chance(rng *rand.Rand, p float64) bool { return rng.Float64() < p }

func newDiffWorld(rng *rand.Rand, mini bool) *diffWorld {
	w := &diffWorld{nowMS: 1_800_000_000_000 + rng.Int64N(1_000_000), nb: 1 + rng.IntN(3), nonces: map[string]string{}, tat: map[string]bool{}}
	now := w.nowMS
	w.until = strconv.FormatInt(now+60_000, 10)
	op := func(x ...any) { w.seed = append(w.seed, x) }
	// a corrupt value (one of bad) with probability p in a third of the
	// cases, else ok
	corrupt := chance(rng, 0.35)
	or := func(ok string, p float64, bad ...string) string {
		if corrupt && chance(rng, p) {
			return pick(rng, bad...)
		}
		return ok
	}
	ms := func(x int64) string { return strconv.FormatInt(x, 10) }
	if !chance(rng, 0.02) {
		sale := []any{"HSET", ":sale", "limit", or(pick(rng, "3", "5", "100"), 0.03, "x", "01", ""),
			"start", or(pick(rng, "0", "0", "0", "0", "0", ms(now-1000), ms(now+1)), 0.02, "1.5"),
			"end", or(pick(rng, "0", "0", "0", "0", "0", ms(now+100_000), ms(now)), 0.02, "-0")}
		if chance(rng, 0.05) {
			sale = append(sale, "paused", pick(rng, "1", "0"))
		}
		if chance(rng, 0.03) {
			sale = append(sale, "fenced", "1")
		}
		if chance(rng, 0.3) {
			sale = append(sale, "pay", or(pick(rng, "0", "60000"), 0.1, "-5", "x"))
			for _, s := range []string{"A", "B", "E"} {
				if chance(rng, 0.5) {
					sale = append(sale, "a:"+s, or(pick(rng, "0", "2"), 0.1, "x", "1.0"))
				}
			}
		}
		if chance(rng, 0.7) {
			sale = append(sale, "orders", or(pick(rng, "0", "4"), 0.05, "x", "-1"))
		}
		for _, s := range []string{"A", "B", "C"} {
			sale = append(sale, "r:"+s, or(strconv.Itoa(rng.IntN(pick(rng, 4, 20))), 0.04, "x", "01", "9.0"))
		}
		sale = append(sale, "r:E", "-1", "s:E", or(strconv.Itoa(rng.IntN(5)), 0.05, "x"))
		op(sale...)
	}
	// the throttles, and states in the windows the script reads
	for range rng.IntN(3) {
		w.throttles = append(w.throttles, pick(rng, [4]int64{2, 1_000_000, 2, 1024}, [4]int64{1, 3_000_000, 1, 4096}, [4]int64{5, 1_000_000, 3, 1024}))
	}
	w.touch()
	for _, th := range w.throttles {
		for _, u := range diffUsers {
			if chance(rng, 0.25) {
				n := now/th[3] + pick(rng, int64(-1), 0, 0, 1, 2)
				st := fmt.Sprintf("%d:%d", now*1000+rng.Int64N(4_000_000)-1_000_000, rng.Int64N(th[0]))
				op("HSET", fmt.Sprintf(":tat:%d:%d", th[3], n), u, or(st, 0.1, "zz", "12345678901234567:1"))
			}
		}
	}
	// orders: in their group, or in a field of their own
	groupVal := map[string]string{}
	for range rng.IntN(5) {
		o := w.newOrder(rng, "", "")
		if chance(rng, 0.5) {
			o.key = pick(rng, "k1", "k2")
		}
		rec := fmt.Sprintf("%s|%s|%d|%s|%s", pick(rng, "p", "p", "c"), o.user, now-5000, o.lines, o.key)
		if chance(rng, 0.05) {
			rec = pick(rng, "p|"+o.user+"|x|A=1|", "garbage", "p|"+o.user+"|1||")
		}
		w.orders = append(w.orders, o)
		if chance(rng, 0.2) {
			op("HSET", ":orders", o.id, rec)
		} else {
			g := orderGroup(o.id)
			if groupVal[g] != "" {
				groupVal[g] += "\n"
			}
			groupVal[g] += o.id + "|" + rec
		}
		if o.key != "" {
			op("HSET", ":idem", o.user+"|"+o.key, o.id)
		}
	}
	for g, v := range groupVal {
		if chance(rng, 0.08) {
			v += "\nzz.other0001|p|u0|1|A=1|"
		}
		op("HSET", ":orders", g, v)
	}
	if chance(rng, 0.15) {
		op("HSET", ":idem", pick(rng, diffUsers...)+"|"+pick(rng, "k1", "k2", "k3"), pick(rng, "g9.miss0000", "g1.seed0000"))
	}
	if chance(rng, 0.3) {
		op("HSET", ":bought", "u0|A", or(pick(rng, "1", "2", "3"), 0.15, "-1", "x", "01"))
	}
	if chance(rng, 0.2) {
		op("HSET", ":bought", "u1|B", or("1", 0.15, "1e1"))
	}
	for _, tok := range []string{"t1", "t2", "ab"} {
		if chance(rng, 0.2) {
			op("SET", ":ptoken:"+tok, "u9")
		}
	}
	// the room
	if chance(rng, 0.6) {
		cfg := []any{"HSET", ":room:cfg", "nb", strconv.Itoa(w.nb), "used", or("0", 0.05, "x")}
		if chance(rng, 0.03) {
			cfg[3] = "0"
		}
		op(cfg...)
		liveBad, badBucket := chance(rng, 0.03), map[string]bool{}
		if liveBad {
			op("SET", ":room:live", "x")
		}
		for _, u := range diffUsers {
			if !chance(rng, 0.5) {
				continue
			}
			nonce := pick(rng, "ab", "c1", "ff0")
			till := pick(rng, w.until, w.until, ms(now), ms(now+5))
			state := fmt.Sprintf("a%d:%s:%s:%s", now-9000, nonce, till, pick(rng, "0", "1"))
			state = or(state, 0.1, "u1:ab:1:g1.xx0000", "a1:zz:1:1")
			if till == w.until {
				w.nonces[u] = nonce
			}
			sum := sha1.Sum([]byte(u))
			bucket := fmt.Sprintf(":room:b:%d", binary.BigEndian.Uint32(sum[:4])%uint32(w.nb))
			switch {
			case badBucket[bucket]:
			case chance(rng, 0.03):
				badBucket[bucket] = true
				op("DEL", bucket)
				op("SET", bucket, "x")
			default:
				op("HSET", bucket, u, state)
			}
			if !liveBad {
				op("ZADD", ":room:live", till, u)
			}
		}
	}
	// the stream, its last id past the clock: '*' then gives both copies
	// the same ids (a 16-digit seq, and one where the seq runs out, too)
	// (miniredis's seq wraps past 2^64: not there)
	last := pick(rng, "0", "7", "999999999999990", "1000000000000000", "18446744073709551615")
	if mini && len(last) > 16 {
		last = "1"
	}
	op("XADD", ":events", "9000000000000-"+last, "seed", "x")
	return w
}

// newOrder is a new order of group g (a new one for ""), of user u (any
// for ""), with random lines.
func (w *diffWorld) newOrder(rng *rand.Rand, g, u string) diffOrder {
	if g == "" {
		g = fmt.Sprintf("g%d.c%d", rng.IntN(3), w.calls)
	}
	if u == "" {
		u = pick(rng, diffUsers...)
	}
	return diffOrder{id: fmt.Sprintf("%s%04d", g, rng.IntN(10000)), user: u, lines: "A=1"}
}

// diffShape is a buy's shape (buy.lua's arguments from the key on).
type diffShape struct {
	key, tok string
	th       int
	gated    bool
	lines    []string // sku, qty argument pairs
}

func (s diffShape) text() string {
	var b []string
	for i := 0; i < len(s.lines); i += 2 {
		q, _ := strconv.Atoi(s.lines[i+1])
		b = append(b, s.lines[i]+"="+strconv.Itoa(q))
	}
	return strings.Join(b, ",")
}

func (s diffShape) args() []any {
	tok, ttl := s.tok, "60000"
	if s.gated {
		tok, ttl = "", "0"
	}
	a := []any{s.key, s.text(), s.th, tok, ttl, len(s.lines) / 2}
	for _, x := range s.lines {
		a = append(a, x)
	}
	if s.gated {
		return append(a, "1")
	}
	return append(a, "")
}

func (w *diffWorld) shape(rng *rand.Rand, lines string) diffShape {
	s := diffShape{}
	if chance(rng, 0.25) {
		s.key = pick(rng, "k1", "k2", "k3")
	}
	s.th = rng.IntN(len(w.throttles) + 1)
	switch {
	case chance(rng, 0.2):
		s.tok = pick(rng, "t1", "t2", "t3", "ab")
	case chance(rng, 0.2):
		s.gated = true
	}
	if lines != "" {
		for _, l := range strings.Split(lines, ",") {
			sku, q, _ := strings.Cut(l, "=")
			s.lines = append(s.lines, sku, q)
		}
		return s
	}
	for range 1 + rng.IntN(3) {
		sku := pick(rng, diffSkus...)
		if chance(rng, 0.5) {
			sku = "A"
		}
		if !chance(rng, 0.1) && slices.Contains(s.lines, sku) {
			continue
		}
		s.lines = append(s.lines, sku, or2(rng, pick(rng, "1", "1", "2", "3"), 0.04, "02"))
	}
	return s
}

func or2(rng *rand.Rand, ok string, p float64, bad string) string {
	if chance(rng, p) {
		return bad
	}
	return ok
}

// call returns the next call's ARGV: 1 to 9 buys, some of shared shapes,
// some resends of orders made before (with their user and lines, or
// not), some of the call's group, some of others.
func (w *diffWorld) call(rng *rand.Rand) []any {
	w.calls++
	w.nowMS += rng.Int64N(2500)
	w.touch()
	args := []any{strconv.FormatInt(w.nowMS*1000+rng.Int64N(1000), 10), 0, len(w.throttles)}
	for _, th := range w.throttles {
		args = append(args, th[0], th[1], th[2], th[3])
	}
	var shared []diffShape
	for range rng.IntN(3) {
		shared = append(shared, w.shape(rng, ""))
	}
	args = append(args, "", len(shared)) // no call group: every id whole
	for _, s := range shared {
		args = append(args, s.args()...)
	}
	group := fmt.Sprintf("g%d.c%d", rng.IntN(3), w.calls)
	count := 1 + rng.IntN(9)
	if chance(rng, 0.1) {
		count = 20 + rng.IntN(30)
	}
	args[1] = count
	// fresh buyers, one each, in some calls: the distinct calls
	fresh := chance(rng, 0.3)
	var callers []int
	users, ids := map[string]bool{}, map[string]bool{}
	distinct := 1
	var made []diffOrder
	for b := 1; b <= count; b++ {
		var o diffOrder
		resend := false
		switch {
		case len(w.orders) > 0 && chance(rng, 0.25):
			o, resend = pick(rng, w.orders...), true
			if chance(rng, 0.3) {
				o.user = pick(rng, diffUsers...)
			}
		case len(made) > 0 && chance(rng, 0.1):
			o = pick(rng, made...)
		case chance(rng, 0.15):
			o = w.newOrder(rng, "", "")
		case fresh:
			o = w.newOrder(rng, group, fmt.Sprintf("n%d.%d", w.calls, b))
		default:
			o = w.newOrder(rng, group, "")
		}
		var s diffShape
		k := 0
		if len(shared) > 0 && !resend && chance(rng, 0.5) {
			k = 1 + rng.IntN(len(shared))
			s = shared[k-1]
		} else {
			l := ""
			if resend && chance(rng, 0.7) {
				l = o.lines
			}
			s = w.shape(rng, l)
			if resend && o.key != "" && chance(rng, 0.5) {
				s.key = o.key
			}
		}
		args = append(args, o.user, o.id, k)
		if k == 0 {
			args = append(args, s.args()...)
		}
		if s.gated {
			nonce, until := w.nonces[o.user], w.until
			if nonce == "" || chance(rng, 0.2) {
				nonce = pick(rng, "ab", "c1", "ff0")
			}
			if chance(rng, 0.1) {
				until = strconv.FormatInt(w.nowMS+1, 10)
			}
			args = append(args, nonce, until)
		}
		if resend || chance(rng, 0.1) {
			callers = append(callers, b)
		}
		if s.key != "" || users[o.user] || ids[o.id] || users[o.id] || ids[o.user] {
			distinct = 0
		}
		for i := 0; i < len(s.lines); i += 2 {
			for j := 0; j < i; j += 2 {
				if s.lines[i] == s.lines[j] {
					distinct = 0
				}
			}
		}
		users[o.user], ids[o.id] = true, true
		o.lines, o.key = s.text(), s.key
		made = append(made, o)
	}
	w.orders = append(w.orders, made...)
	args = append(args, len(callers))
	for _, b := range callers {
		args = append(args, b)
	}
	w.distinct += distinct
	return append(args, pick(rng, "0", "1"), distinct)
}
