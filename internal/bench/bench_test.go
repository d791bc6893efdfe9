package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
)

// openStores opens stores for a test and closes them (dropping what the
// run left) in t.Cleanup, failing the test if that fails.
func openStores(t *testing.T, target Target) *Stores {
	t.Helper()
	s, err := Open(t.Context(), target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// tiny runs one approach on a fixed stock until it sells out.
func tiny(t *testing.T, s *Stores, name string, stock int64, clients int) Result {
	t.Helper()
	a, ok := lookup(name)
	if !ok {
		t.Fatalf("no approach %s", name)
	}
	cfg := Config{Concurrency: clients, Stock: stock, Duration: 5 * time.Second, Batch: 4}
	cfg.defaults()
	res, err := measure(t.Context(), s, a, cfg, name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// checkAtomic: sold out exactly, counted from the store, nothing broken.
func checkAtomic(t *testing.T, r Result, stock int64) {
	t.Helper()
	if r.Oversold() != 0 || r.Sold != stock || r.Remaining != 0 || !r.SoldOut || r.Errors != 0 {
		t.Errorf("%s: sold %d of %d (remaining %d, oversold %d), sold out %v, %d errors (%s)",
			r.Name, r.Sold, stock, r.Remaining, r.Oversold(), r.SoldOut, r.Errors, r.FirstError)
	}
	if r.Acked != r.Sold || r.Ops < r.Sold || r.P50 <= 0 || r.Max < r.P99 || r.P99 < r.P50 {
		t.Errorf("%s: acked %d, ops %d, sold %d, latency %v/%v/%v", r.Name, r.Acked, r.Ops, r.Sold, r.P50, r.P99, r.Max)
	}
}

// checkEvery runs every approach tiny on s: stock 50, 8 clients, until
// sold out; redis-naive with 16 clients, and it only has to have run and
// to agree with its own store.
func checkEvery(t *testing.T, s *Stores) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			if name == RedisNaive {
				r := tiny(t, s, name, 50, 16)
				if r.Ops == 0 || !r.SoldOut || !r.Consistent() || r.Errors != 0 || r.Sold != r.Acked {
					t.Errorf("naive: ops %d, sold out %v, sold %d (acked %d), remaining %d, %d errors (%s)",
						r.Ops, r.SoldOut, r.Sold, r.Acked, r.Remaining, r.Errors, r.FirstError)
				}
				t.Logf("redis-naive oversold %d of 50 with 16 clients", r.Oversold())
				return
			}
			checkAtomic(t, tiny(t, s, name, 50, 8), 50)
		})
	}
}

// TestEveryApproach runs every approach on the machine's Redis and
// PostgreSQL, then checks the run left nothing behind.
func TestEveryApproach(t *testing.T) {
	s, err := Open(t.Context(), Target{RedisURL: redistest.URL(), DatabaseURL: dbtest.ServerURL(),
		NeedRedis: true, NeedDB: true, Concurrency: 16})
	if err != nil {
		t.Fatal(err)
	}
	if s.RedisEmbedded || s.DBEmbedded || s.Dialect != "postgres" || !strings.HasPrefix(s.RedisVersion, "Redis ") {
		t.Fatalf("not the real servers: %s, %s", s.RedisVersion, s.DBVersion)
	}
	rdb, db, schema, run := s.Redis, s.DB, s.Schema, s.Run()
	checkEvery(t, s)

	// Every item was dropped as its approach finished.
	var keys []string
	iter := rdb.Scan(context.Background(), 0, "*bench-"+run+"-*", 1000).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil || len(keys) != 0 {
		t.Errorf("keys left after the run: %v %v", keys, err)
	}
	var tables int
	if err := db.QueryRow("SELECT count(*) FROM information_schema.tables WHERE table_schema = $1", schema).Scan(&tables); err != nil || tables != 0 {
		t.Errorf("%d tables left in %s (%v)", tables, schema, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Close dropped the schema.
	check, err := Open(t.Context(), Target{DatabaseURL: dbtest.ServerURL(), NeedDB: true, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	var n int
	if err := check.DB.QueryRow("SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1", schema).Scan(&n); err != nil || n != 0 {
		t.Errorf("schema %s still there (%d, %v)", schema, n, err)
	}
}

// TestEveryApproachEmbedded runs every approach on miniredis and SQLite.
func TestEveryApproachEmbedded(t *testing.T) {
	s := openStores(t, Target{RedisURL: Embedded, DatabaseURL: Embedded, NeedRedis: true, NeedDB: true, Concurrency: 16})
	if !s.RedisEmbedded || !s.DBEmbedded || s.Dialect != "sqlite" {
		t.Fatalf("not embedded: %s, %s", s.RedisVersion, s.DBVersion)
	}
	checkEvery(t, s)
}

// TestDefaultsAreOwn: with no URL a run writes to no server it was not
// told of: it starts a redis-server of its own, stopped at Close, and uses
// SQLite in a temp dir, removed at Close; without redis-server on PATH it
// uses the embedded server, and says why.
func TestDefaultsAreOwn(t *testing.T) {
	s, err := Open(t.Context(), Target{NeedRedis: true, NeedDB: true, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !s.RedisOwn || s.RedisEmbedded || s.RedisAddr == "127.0.0.1:6379" || !strings.HasPrefix(s.RedisVersion, "Redis ") {
		t.Errorf("redis %q at %s (own %v, embedded %v); want a redis-server of the run's own", s.RedisVersion, s.RedisAddr, s.RedisOwn, s.RedisEmbedded)
	}
	if !s.DBEmbedded || s.Dialect != "sqlite" || !strings.Contains(s.DBNote, "--db") {
		t.Errorf("database %q (%q); want SQLite in a temp dir", s.DBVersion, s.DBNote)
	}
	var out bytes.Buffer
	PrintText(&out, Report{Machine: s.machine(), Config: Config{Concurrency: 2}})
	if !strings.Contains(out.String(), "of this run's own") || !strings.Contains(out.String(), "pass --db URL") {
		t.Errorf("header does not say so:\n%s", out.String())
	}
	addr, path := s.RedisAddr, s.DBAddr
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("the run's redis-server at %s still answers after Close", addr)
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Errorf("the SQLite file's dir %s: %v; want it removed", filepath.Dir(path), err)
	}

	t.Setenv("PATH", t.TempDir())
	s = openStores(t, Target{NeedRedis: true, Concurrency: 2})
	if !s.RedisEmbedded || !strings.Contains(s.RedisNote, "redis-server") {
		t.Errorf("without redis-server on PATH: redis %q (%q); want the embedded server and why", s.RedisVersion, s.RedisNote)
	}
	// A URL given explicitly must answer.
	if _, err := Open(t.Context(), Target{RedisURL: "redis://127.0.0.1:1/0", NeedRedis: true}); err == nil {
		t.Error("an unreachable --redis was accepted")
	}
}

// fakeItem sells from an in-memory counter; its store records extra more
// sales than it made (as a store that oversold would show).
type fakeItem struct {
	left, sold atomic.Int64
	extra      int64
	fail       bool
}

func (f *fakeItem) buy(_ context.Context, buyers []string, out []outcome) {
	for i := range buyers {
		if f.fail {
			out[i] = outcome{err: errors.New("store down")}
			continue
		}
		if f.left.Add(-1) < 0 {
			f.left.Add(1)
			out[i] = outcome{soldOut: true}
			continue
		}
		f.sold.Add(1)
		out[i] = outcome{sold: true, retries: 1}
	}
}

func (f *fakeItem) count(context.Context) (tally, error) {
	return tally{sold: f.sold.Load() + f.extra, remaining: f.left.Load() - f.extra}, nil
}

func (f *fakeItem) drop(context.Context) error { return nil }

func fakeApproach(name string, item *fakeItem) approach {
	return approach{name: name, atomic: true, prepare: func(_ context.Context, _ *Stores, _ Config, stock int64) (hotItem, error) {
		item.left.Store(stock)
		item.sold.Store(0)
		return item, nil
	}}
}

// TestOversoldIsCountedFromTheStore: the clients were told 50 sales; the
// store holds 3 more, so the result says 3 oversold, and an atomic
// approach that oversold is reported broken.
func TestOversoldIsCountedFromTheStore(t *testing.T) {
	item := &fakeItem{extra: 3}
	cfg := Config{Concurrency: 4, Stock: 50, Duration: 5 * time.Second}
	cfg.defaults()
	var finals int
	cfg.Progress = func(line string, final bool) {
		if final {
			finals++
		}
	}
	r, err := measure(t.Context(), &Stores{}, fakeApproach("fake", item), cfg, "fake")
	if err != nil {
		t.Fatal(err)
	}
	if r.Acked != 50 || r.Sold != 53 || r.Oversold() != 3 || r.Remaining != -3 || !r.Consistent() || r.Retries != 50 {
		t.Errorf("acked %d, sold %d, oversold %d, remaining %d, retries %d", r.Acked, r.Sold, r.Oversold(), r.Remaining, r.Retries)
	}
	if finals != 1 {
		t.Errorf("%d final progress lines, want 1", finals)
	}
	rep := Report{Results: []Result{r}}
	if b := rep.Broken(); len(b) != 1 || !strings.Contains(b[0], "fake oversold 3 units") {
		t.Errorf("broken = %q", b)
	}
	r.Atomic = false // redis-naive's oversell is expected, not broken
	if b := (Report{Results: []Result{r}}).Broken(); len(b) != 0 {
		t.Errorf("broken = %q", b)
	}
	r.Remaining = 10 // the counter and the sales log disagree
	if b := (Report{Results: []Result{r}}).Broken(); len(b) != 1 || !strings.Contains(b[0], "!= stock") {
		t.Errorf("broken = %q", b)
	}
}

// TestCalibrationAndTimeLimit: without a stock the approach gets rate x
// duration; a store that only fails stops its clients early.
func TestCalibrationAndTimeLimit(t *testing.T) {
	item := &fakeItem{}
	cfg := Config{Concurrency: 2, Duration: 300 * time.Millisecond, Calibration: 100 * time.Millisecond}
	cfg.defaults()
	r, err := measure(t.Context(), &Stores{}, fakeApproach("fake", item), cfg, "fake")
	if err != nil {
		t.Fatal(err)
	}
	want := int64(r.CalibratedRate * 0.3)
	if r.CalibratedRate <= 0 || r.Stock < want || r.Stock > want+1 || !r.SoldOut || r.Sold != r.Stock {
		t.Errorf("calibrated %.0f/s, stock %d (want about %d), sold %d, sold out %v", r.CalibratedRate, r.Stock, want, r.Sold, r.SoldOut)
	}

	failing := &fakeItem{fail: true}
	cfg.Stock = 10
	r, err = measure(t.Context(), &Stores{}, fakeApproach("fake", failing), cfg, "fake")
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors != 2*maxErrorStreak || r.SoldOut || r.FirstError != "store down" {
		t.Errorf("%d errors (%q), sold out %v", r.Errors, r.FirstError, r.SoldOut)
	}
	// A calibration that sells nothing is a result with its errors, not
	// the end of the run; the report calls it failed.
	cfg.Stock = 0
	r, err = measure(t.Context(), &Stores{}, fakeApproach("fake", failing), cfg, "fake")
	if err != nil || r.Errors == 0 || r.Ops != 0 || r.Stock != 0 {
		t.Errorf("err %v, %d errors, %d ops, stock %d", err, r.Errors, r.Ops, r.Stock)
	}
	if b := (Report{Results: []Result{r}}).Broken(); len(b) != 1 || !strings.Contains(b[0], "fake sold nothing") {
		t.Errorf("broken = %q", b)
	}
}

func TestSelect(t *testing.T) {
	all, err := Select("")
	if err != nil || !slices.Equal(all, Names()) || len(all) != 10 {
		t.Errorf("Select(\"\") = %v, %v", all, err)
	}
	got, err := Select(" redis-naive,db-pessimistic-lock ,redis-naive")
	if err != nil || !slices.Equal(got, []string{DBPessimisticLock, RedisNaive}) {
		t.Errorf("got %v, %v; want run order, no duplicates", got, err)
	}
	_, err = Select("redis-naive,nope,redis-lua")
	if err == nil || !strings.Contains(err.Error(), `"nope", "redis-lua"`) || !strings.Contains(err.Error(), RedisBatched) {
		t.Errorf("err = %v", err)
	}
	if r, d := Needs([]string{RedisNaive}); !r || d {
		t.Errorf("Needs(redis-naive) = %v, %v", r, d)
	}
	if r, d := Needs([]string{DBOptimisticLock}); r || !d {
		t.Errorf("Needs(db-optimistic-lock) = %v, %v", r, d)
	}
}

// sampleReport is a run that did not happen: two database approaches and
// two Redis ones, one of which oversold.
func sampleReport() Report {
	res := func(name string, db, atomic bool, ops int64, secs float64) Result {
		return Result{Name: name, DB: db, Atomic: atomic, Ops: ops, Acked: ops, Sold: ops, Stock: ops,
			Elapsed: time.Duration(secs * float64(time.Second)), SoldOut: true,
			P50: 1500 * time.Microsecond, P99: 9 * time.Millisecond, Max: 12 * time.Millisecond}
	}
	naive := res(RedisNaive, false, false, 40_000, 1)
	naive.Sold, naive.Remaining = 40_063, -63
	return Report{
		Machine: Machine{GOOS: "linux", GOARCH: "amd64", CPUs: 2, Go: "go1.26", Redis: "Redis 7.0.15", Database: "PostgreSQL 15.20"},
		Config:  Config{Concurrency: 64, Duration: 5 * time.Second, Calibration: 500 * time.Millisecond, Segments: 8, Batch: 16},
		Results: []Result{
			res(DBPessimisticLock, true, true, 800, 1),
			res(DBConditionalUpdate, true, true, 2_000, 2), // 1,000/s: the best database approach
			naive,
			res(RedisLuaEvalSHA, false, true, 150_000, 5), // 30,000/s
		},
	}
}

func TestRatio(t *testing.T) {
	rep := sampleReport()
	if rep.BestDB() != 1000 {
		t.Errorf("best db %v, want 1000", rep.BestDB())
	}
	for i, want := range []float64{0.8, 1, 40, 30} {
		if got := rep.Ratio(rep.Results[i]); got != want {
			t.Errorf("%s: ratio %v, want %v", rep.Results[i].Name, got, want)
		}
	}
	rep.Results = rep.Results[2:]
	if rep.BestDB() != 0 || rep.Ratio(rep.Results[0]) != 0 {
		t.Error("a ratio without a database approach")
	}
}

func TestJSON(t *testing.T) {
	var out bytes.Buffer
	if err := PrintJSON(&out, sampleReport()); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Machine    map[string]any   `json:"machine"`
		Settings   map[string]any   `json:"settings"`
		Approaches []map[string]any `json:"approaches"`
	}
	dec := json.NewDecoder(&out)
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"goos", "goarch", "cpus", "go", "redis", "database", "redis_embedded", "database_embedded"} {
		if _, ok := doc.Machine[k]; !ok {
			t.Errorf("machine has no %q: %v", k, doc.Machine)
		}
	}
	if doc.Settings["stock_sizing"] != "calibrated" || doc.Settings["concurrency"] != 64.0 {
		t.Errorf("settings %v", doc.Settings)
	}
	if len(doc.Approaches) != 4 {
		t.Fatalf("%d approaches", len(doc.Approaches))
	}
	for _, a := range doc.Approaches {
		for _, k := range []string{"name", "ops_per_s", "p50_ms", "p99_ms", "max_ms", "errors", "oversold", "sold", "stock",
			"remaining", "acked", "retries", "elapsed_s", "sold_out", "consistent", "ratio_to_best_db"} {
			if _, ok := a[k]; !ok {
				t.Errorf("%v has no %q", a["name"], k)
			}
		}
	}
	naive, sha := doc.Approaches[2], doc.Approaches[3]
	if naive["name"] != RedisNaive || naive["oversold"] != 63.0 || naive["sold"] != 40063.0 || naive["p50_ms"] != 1.5 {
		t.Errorf("naive: %v", naive)
	}
	if sha["ops_per_s"] != 30000.0 || sha["ratio_to_best_db"] != 30.0 {
		t.Errorf("evalsha: %v", sha)
	}

	rep := sampleReport()
	rep.Results = rep.Results[2:]
	out.Reset()
	if err := PrintJSON(&out, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"ratio_to_best_db": null`) {
		t.Errorf("no null ratio without a database approach:\n%s", out.String())
	}
}

func TestText(t *testing.T) {
	var out bytes.Buffer
	PrintText(&out, sampleReport())
	text := out.String()
	for _, want := range []string{
		"linux/amd64, 2 CPUs, go1.26", "Redis 7.0.15", "PostgreSQL 15.20", "calibration run",
		"approach", "x best db", "oversold",
		"redis-naive oversold 63 units (its stock ended at -63)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
	var row string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, RedisLuaEvalSHA+" ") && row == "" { // the table's row, not the legend's
			row = line
		}
	}
	if f := strings.Fields(row); len(f) != 11 || f[1] != "30,000" || f[2] != "30.0" || f[3] != "1.50" || f[9] != "0" {
		t.Errorf("evalsha row %q", row)
	}
}

func TestSVG(t *testing.T) {
	rep := sampleReport()
	rep.Results[0].Name = `a<b&"c"` // escaped, never breaking the XML
	var out bytes.Buffer
	if err := WriteSVG(&out, rep); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&out)
	var bars []string
	var root string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			for _, a := range se.Attr {
				if se.Name.Local == "rect" && a.Name.Local == "class" && a.Value == "bar" {
					bars = append(bars, se.Name.Local)
				}
			}
		}
	}
	if root != "svg" || len(bars) != len(rep.Results) {
		t.Errorf("root %q, %d bars for %d approaches", root, len(bars), len(rep.Results))
	}
}

func TestHistogram(t *testing.T) {
	for range 10_000 {
		v := rand.Int64N(1 << 40)
		b := bucket(v)
		if upper(b) < v || (b > 0 && upper(b-1) >= v) {
			t.Fatalf("%d in bucket %d: [%d, %d]", v, b, upper(b-1)+1, upper(b))
		}
	}
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	var other histogram
	other.record(time.Second)
	h.merge(&other)
	within := func(got, want time.Duration) bool { return got >= want && float64(got) <= float64(want)*1.02 }
	if p := h.percentile(0.5); !within(p, 500*time.Microsecond) {
		t.Errorf("p50 %v", p)
	}
	if p := h.percentile(0.99); !within(p, 990*time.Microsecond) {
		t.Errorf("p99 %v", p)
	}
	if h.percentile(1) != time.Second || h.max != time.Second || h.n != 1001 {
		t.Errorf("p100 %v, max %v, n %d", h.percentile(1), h.max, h.n)
	}
	var empty histogram
	if empty.percentile(0.5) != 0 {
		t.Error("percentile of nothing")
	}
}

// TestRounds: each approach's median round is reported with every round's
// ops/s; a round that broke an invariant counts even when it is not the
// median; Run interleaves the rounds.
func TestRounds(t *testing.T) {
	res := func(name string, ops int64, oversold int64) Result {
		return Result{Name: name, Atomic: true, Ops: ops, Elapsed: time.Second, Stock: 10, Sold: 10 + oversold, Remaining: -oversold}
	}
	rounds := [][]Result{
		{res("a", 300, 0), res("b", 10, 0)},
		{res("a", 100, 2), res("b", 30, 0)},
		{res("a", 200, 0), res("b", 20, 0)},
	}
	got := medians(rounds)
	if got[0].Ops != 200 || got[1].Ops != 20 || !slices.Equal(got[0].RoundOps, []float64{300, 100, 200}) {
		t.Fatalf("medians = %+v", got)
	}
	rep := Report{Results: got, Rounds: rounds}
	if b := rep.Broken(); len(b) != 1 || !strings.Contains(b[0], "a oversold 2 units") {
		t.Fatalf("broken = %q, want the second round's oversell", b)
	}

	s := openStores(t, Target{RedisURL: Embedded, NeedRedis: true, Concurrency: 4})
	var labels []string
	cfg := Config{Approaches: []string{RedisLuaEvalSHA, RedisNaive}, Concurrency: 2, Stock: 20, Duration: 5 * time.Second, Rounds: 3,
		Progress: func(line string, final bool) {
			if final {
				labels = append(labels, strings.Fields(line)[1]+" "+strings.Fields(line)[3])
			}
		}}
	run, err := Run(t.Context(), s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"1/3 redis-lua-evalsha", "1/3 redis-naive", "2/3 redis-lua-evalsha", "2/3 redis-naive", "3/3 redis-lua-evalsha", "3/3 redis-naive"}
	if !slices.Equal(labels, want) || len(run.Rounds) != 3 || len(run.Results) != 2 || len(run.Results[0].RoundOps) != 3 {
		t.Fatalf("order %q, %d rounds, results %+v", labels, len(run.Rounds), run.Results)
	}
	var doc struct {
		Settings   struct{ Rounds int }
		Approaches []struct {
			RoundsOpsPerS []float64 `json:"rounds_ops_per_s"`
		}
	}
	var buf bytes.Buffer
	if err := PrintJSON(&buf, run); err != nil || json.Unmarshal(buf.Bytes(), &doc) != nil || doc.Settings.Rounds != 3 || len(doc.Approaches[1].RoundsOpsPerS) != 3 {
		t.Fatalf("JSON %s", buf.String())
	}
}
