package cost

import (
	"bytes"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestParseProcStat: utime and stime are fields 14 and 15 counted after the
// last ')', whatever the command name holds.
func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		line string
		want procStat
	}{
		{"31983 (cat) R 31981 31981 5240 0 -1 4194304 99 0 0 0 7 3 0 0 20 0 1 0 134780 3133440 360\n",
			procStat{Comm: "cat", PPID: 31981, Ticks: 10}},
		// A name with spaces and a ") " in it, as a process may set.
		{"42 (post gres) 1 2 3) S 7 42 42 0 -1 4194560 1 0 0 0 1234 5678 0 0 20 0 1 0 99 1 1",
			procStat{Comm: "post gres) 1 2 3", PPID: 7, Ticks: 6912}},
	} {
		got, err := parseProcStat(tc.line)
		if err != nil || got != tc.want {
			t.Errorf("parseProcStat(%q) = %+v, %v; want %+v", tc.line, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "1 cat R 1 2", "1 (cat) R 1 2 3", "1 (cat) R x 1 1 0 -1 0 0 0 0 0 1 1", "1 (cat) R 1 1 1 0 -1 0 0 0 0 0 -5 1"} {
		if got, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q) = %+v, want an error", bad, got)
		}
	}
	// This process's own line parses, with its parent.
	st, err := readProcStat(os.Getpid())
	if err != nil || st.PPID != os.Getppid() || st.Ticks < 0 {
		t.Errorf("readProcStat(self) = %+v, %v; want parent %d", st, err, os.Getppid())
	}
}

func TestParseRedisInfo(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:4.432339\r\nused_cpu_user:10.170011\r\nused_cpu_sys_children:9.000000\r\n" +
		"# Commandstats\r\ncmdstat_eval:calls=93,usec=12032,usec_per_call=129.38\r\n" +
		"cmdstat_evalsha:calls=139425,usec=8052157,usec_per_call=57.75,rejected_calls=0,failed_calls=49\r\n"
	got, err := parseRedisInfo(info)
	want := redisStats{CPUMicros: 14602350, EvalshaCalls: 139425, EvalshaMicros: 8052157}
	if err != nil || got.EvalshaCalls != want.EvalshaCalls || got.EvalshaMicros != want.EvalshaMicros || math.Abs(got.CPUMicros-want.CPUMicros) > 0.01 {
		t.Errorf("parseRedisInfo = %+v, %v; want %+v", got, err, want)
	}
	if _, err := parseRedisInfo("used_cpu_sys:1.0\r\n"); err == nil {
		t.Error("INFO without used_cpu_user parsed")
	}
	if _, err := parseRedisInfo("used_cpu_sys:1.0\r\nused_cpu_user:2\r\ncmdstat_evalsha:calls=x,usec=1\r\n"); err == nil {
		t.Error("a bad cmdstat_evalsha parsed")
	}
}

// TestAccount: the per-buy figures from before/after counters.
func TestAccount(t *testing.T) {
	before := snapshot{serviceTicks: 1000, redis: redisStats{CPUMicros: 5e6, EvalshaCalls: 100, EvalshaMicros: 40_000},
		machine: machineTimes{total: 10_000, idle: 4000, steal: 100}}
	// 2.5 s of the service, 0.8 s of Redis, 1000 EVALSHA of 0.6 s in all,
	// 0.9 s of our PostgreSQL and 1.5 s of all of it, over 25,000 buys.
	// The machine: 2,000 ticks, 300 of them idle and 100 stolen.
	after := snapshot{serviceTicks: 1250, redis: redisStats{CPUMicros: 5.8e6, EvalshaCalls: 1100, EvalshaMicros: 640_000},
		machine: machineTimes{total: 12_000, idle: 4300, steal: 200}}
	r := Result{Buys: 25_000}
	r.account(before, after, func() (float64, float64) { return 0.9e6, 1.5e6 })
	want := Result{Buys: 25_000, ServiceUS: 100, RedisUS: 32, PostgresUS: 36, PostgresAllUS: 60, TotalUS: 168,
		EvalshaCalls: 1000, BuysPerEvalsha: 25, EvalshaUSPerBuy: 24, IdlePct: 15, StealPct: 5}
	for _, c := range columns {
		if g, w := c.get(&r), c.get(&want); math.Abs(g-w) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.head, g, w)
		}
	}
	if r.PostgresAllUS != want.PostgresAllUS {
		t.Errorf("PG all = %v, want %v", r.PostgresAllUS, want.PostgresAllUS)
	}
	if len(r.Problems) != 0 {
		t.Errorf("problems %q, want none", r.Problems)
	}
	// The machine's counters went back (a CPU taken offline): its idle %
	// and steal % are not measured, and the round says so rather than
	// show a saturated machine's 0 % idle.
	back := after
	back.machine.idle = before.machine.idle - 1
	r = Result{Buys: 25_000}
	r.account(before, back, func() (float64, float64) { return 0.9e6, 1.5e6 })
	if r.IdlePct != 0 || r.StealPct != 0 || len(r.Problems) != 1 || !strings.Contains(r.Problems[0], "idle % and steal % not measured") {
		t.Errorf("counters back: idle %v, steal %v, problems %q; want 0, 0 and the problem", r.IdlePct, r.StealPct, r.Problems)
	}
	// No buys: no figure (shown as "-"), not a division by zero.
	none := Result{}
	none.account(before, after, func() (float64, float64) { return 1, 1 })
	if none.ServiceUS != 0 || none.TotalUS != 0 || none.BuysPerEvalsha != 0 || math.IsNaN(none.RedisUS) {
		t.Errorf("no buys: %+v, want zero figures", none)
	}
}

// TestMachineTimes: /proc/stat's cpu line, its idle (idle + iowait) and
// steal, and their shares of the time between two readings.
func TestMachineTimes(t *testing.T) {
	stat := "cpu  4705 356 584 3699 23 0 40 17 5 0\ncpu0 2000 100 300 1800 10 0 20 9 0 0\nintr 1 2 3\n"
	m, err := parseMachineTimes(stat)
	// guest (5) and guest_nice (0) are inside user and nice: not added.
	if want := (machineTimes{total: 4705 + 356 + 584 + 3699 + 23 + 40 + 17, idle: 3699 + 23, steal: 17}); err != nil || m != want {
		t.Fatalf("parse = %+v, %v; want %+v", m, err, want)
	}
	if m, err := parseMachineTimes("cpu  10 0 5 80 5\n"); err != nil || m != (machineTimes{total: 100, idle: 85}) {
		t.Errorf("a line without steal = %+v, %v; want steal 0", m, err)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5\n", "cpu 1 2 x 4 5\n", "cpu 1 2 3\n", "cpu 1 -2 3 4 5\n"} {
		if _, err := parseMachineTimes(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	before := machineTimes{total: 1000, idle: 500, steal: 10}
	if idle, steal, ok := before.shares(machineTimes{total: 1400, idle: 600, steal: 30}); idle != 25 || steal != 5 || !ok {
		t.Errorf("shares = %v%% idle, %v%% steal, %v; want 25, 5, true", idle, steal, ok)
	}
	// No time passed, or a counter went back: not measured (and not 0 %
	// idle, a saturated machine's figure, passed off as one).
	for _, after := range []machineTimes{before, {total: 1400, idle: 499, steal: 30}, {total: 1400, idle: 600, steal: 9},
		{total: 900, idle: 500, steal: 10}, {total: 1010, idle: 510, steal: 20}} {
		if idle, steal, ok := before.shares(after); idle != 0 || steal != 0 || ok {
			t.Errorf("%+v to %+v: %v, %v, %v; want 0, 0, false", before, after, idle, steal, ok)
		}
	}
	if m, err := readMachineTimes(); err != nil || m.total <= 0 {
		t.Errorf("this machine's /proc/stat: %+v, %v", m, err)
	}
}

func TestTicksToMicros(t *testing.T) {
	if got := ticksToMicros(250); got != 2.5e6 {
		t.Errorf("250 ticks = %v µs, want 2,500,000", got)
	}
}

// TestPgOurs: the round database's backends and the background processes
// are ours; other databases' backends are not.
func TestPgOurs(t *testing.T) {
	const db = "seckill_cost_ab12r1a"
	for title, want := range map[string]bool{
		"postgres: postgres seckill_cost_ab12r1a 127.0.0.1(50312) idle": true,
		"postgres: autovacuum worker seckill_cost_ab12r1a":              true,
		"postgres: walwriter":    true,
		"postgres: checkpointer": true,
		"postgres: postgres seckill_cost_ab12r1a_x 127.0.0.1(1) idle": false,
		"postgres: postgres test 127.0.0.1(50313) INSERT":             false,
		"postgres: walwriterx":                                        false,
		"":                                                            false,
	} {
		if got := pgOurs(title, db); got != want {
			t.Errorf("pgOurs(%q) = %v, want %v", title, got, want)
		}
	}
}

func TestSummarize(t *testing.T) {
	rep := Report{Builds: []string{"a", "b"}, Results: []Result{
		{Build: "A", Round: 1, BuysPerS: 100, TotalUS: 10},
		{Build: "B", Round: 1, BuysPerS: 300, TotalUS: 5},
		{Build: "A", Round: 2, BuysPerS: 200, TotalUS: 30},
		{Build: "B", Round: 2, BuysPerS: 100, TotalUS: 4},
		{Build: "A", Round: 3, BuysPerS: 150, TotalUS: 20},
	}}.summarize()
	if len(rep.Medians) != 2 || rep.Medians[0].BuysPerS != 150 || rep.Medians[0].TotalUS != 20 ||
		rep.Medians[1].BuysPerS != 200 || rep.Medians[1].TotalUS != 4.5 {
		t.Fatalf("medians %+v, want A 150/s 20 µs, B 200/s 4.5 µs", rep.Medians)
	}
	if rep.RatioBA == nil || math.Abs(rep.RatioBA.BuysPerS-200.0/150) > 1e-9 || rep.RatioBA.TotalUS != 4.5/20 || rep.RatioBA.ServiceUS != 0 {
		t.Errorf("ratio %+v, want buys/s 1.33, total 0.225, service 0 (no A figure)", rep.RatioBA)
	}
}

// TestRedisCommandBreakdown: every command of INFO commandstats is read,
// counted per buy over the window (a command that did not run in it is
// left out), the medians are taken per command over a build's rounds (a
// round without it counting 0), and the table names each with its calls
// and usec per buy; the bytes Redis read and wrote are per buy too.
func TestRedisCommandBreakdown(t *testing.T) {
	info := func(evalsha, xack, info, in, out string) string {
		return "# CPU\r\nused_cpu_sys:1.0\r\nused_cpu_user:1.0\r\n# Stats\r\ntotal_net_input_bytes:" + in +
			"\r\ntotal_net_output_bytes:" + out + "\r\n# Commandstats\r\ncmdstat_evalsha:" + evalsha +
			"\r\ncmdstat_xack:" + xack + "\r\ncmdstat_info:" + info +
			"\r\ncmdstat_client|setname:calls=1,usec=2,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n"
	}
	before, err := parseRedisInfo(info("calls=10,usec=500,usec_per_call=50", "calls=4,usec=8,usec_per_call=2", "calls=1,usec=30", "1000", "2000"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseRedisInfo(info("calls=110,usec=10500,usec_per_call=95", "calls=24,usec=48,usec_per_call=2", "calls=3,usec=90", "129000", "102000"))
	if err != nil {
		t.Fatal(err)
	}
	if after.EvalshaCalls != 110 || after.EvalshaMicros != 10500 || after.Commands["client|setname"] != (cmdCounts{1, 2}) {
		t.Fatalf("parsed %+v", after)
	}
	r := Result{Buys: 1000}
	r.account(snapshot{redis: before}, snapshot{redis: after}, func() (float64, float64) { return 0, 0 })
	want := []CommandCost{{"evalsha", 0.1, 10}, {"info", 0.002, 0.06}, {"xack", 0.02, 0.04}}
	if len(r.Commands) != len(want) {
		t.Fatalf("commands %+v, want %+v (client|setname did not run in the window)", r.Commands, want)
	}
	for i, w := range want {
		g := r.Commands[i]
		if g.Name != w.Name || math.Abs(g.CallsPerBuy-w.CallsPerBuy) > 1e-12 || math.Abs(g.USPerBuy-w.USPerBuy) > 1e-12 {
			t.Errorf("command %d = %+v, want %+v", i, g, w)
		}
	}
	if r.RedisInBytes != 128 || r.RedisOutBytes != 100 || r.EvalshaUSPerBuy != 10 {
		t.Errorf("in %v out %v B, EVALSHA %v µs per buy; want 128, 100, 10", r.RedisInBytes, r.RedisOutBytes, r.EvalshaUSPerBuy)
	}
	if _, err := parseRedisInfo("used_cpu_sys:1\r\nused_cpu_user:1\r\ncmdstat_xack:calls=1,usec=x\r\n"); err == nil {
		t.Error("a bad cmdstat_xack parsed")
	}

	other := Result{Build: "A", Commands: []CommandCost{{"evalsha", 0.2, 30}}}
	third := Result{Build: "A", Commands: []CommandCost{{"evalsha", 0.3, 20}, {"xack", 0.04, 0.08}}}
	r.Build = "A"
	rep := Report{Builds: []string{"a"}, Results: []Result{r, other, third}}.summarize()
	m := rep.Medians[0].Commands
	// evalsha: 0.1, 0.2, 0.3 calls and 10, 30, 20 µs; xack: 0.02, none,
	// 0.04 calls and 0.04, 0, 0.08 µs; info: 0.002, none, none.
	wantM := []CommandCost{{"evalsha", 0.2, 20}, {"xack", 0.02, 0.04}, {"info", 0, 0}}
	if len(m) != len(wantM) {
		t.Fatalf("median commands %+v, want %+v", m, wantM)
	}
	for i, w := range wantM {
		if m[i].Name != w.Name || math.Abs(m[i].CallsPerBuy-w.CallsPerBuy) > 1e-12 || math.Abs(m[i].USPerBuy-w.USPerBuy) > 1e-12 {
			t.Errorf("median command %d = %+v, want %+v", i, m[i], w)
		}
	}
	var buf bytes.Buffer
	PrintText(&buf, rep)
	for _, line := range []string{"Redis commands per buy", "evalsha   0.2000  20.00", "xack   0.0200   0.04", "Redis in B"} {
		if !strings.Contains(buf.String(), line) {
			t.Errorf("the report has no %q:\n%s", line, buf.String())
		}
	}
}

// TestQuietGeneratorCollects: quietGenerator runs a whole collection before
// a load, so the generator's garbage is gone when the load starts (seen
// failing with an empty quietGenerator: no cycle).
func TestQuietGeneratorCollects(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	quietGenerator()
	runtime.ReadMemStats(&after)
	if after.NumGC <= before.NumGC {
		t.Fatalf("NumGC %d before quietGenerator, %d after: want a cycle", before.NumGC, after.NumGC)
	}
}

// TestLagColumn: the send lag p99 and the connection wait p99 are "-" for
// a closed-loop round (no schedule to lag behind), and numbers for an
// open-loop one, 0.00 when no send lagged or waited, not the closed
// loop's "-".
func TestLagColumn(t *testing.T) {
	rep := Report{Builds: []string{"a"}, Results: []Result{
		{Build: "A", Round: 1, Load: "closed", P99MS: 5},
		{Build: "A", Round: 2, Load: "open", P99MS: 30, LagP99MS: 0, WaitP99MS: 12.5},
		{Build: "A", Round: 3, Load: "open", P99MS: 25, LagP99MS: 1.5},
	}}
	var buf bytes.Buffer
	PrintText(&buf, rep)
	// The header names each cell: its columns are split on two spaces or
	// more, as the table aligns them, and a row's cells on spaces.
	var heads []string
	lag, wait := map[string]string{}, map[string]string{}
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "round  build  ") {
			heads = regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), -1)
			continue
		}
		if f := strings.Fields(l); len(f) > 0 && len(f) == len(heads) && (f[0] == "1" || f[0] == "2" || f[0] == "3") {
			lag[f[0]], wait[f[0]] = f[slices.Index(heads, "lag p99 ms")], f[slices.Index(heads, "wait p99 ms")]
		}
	}
	if !slices.Contains(heads, "lag p99 ms") || !slices.Contains(heads, "wait p99 ms") {
		t.Fatalf("the table has no lag p99 ms and wait p99 ms columns:\n%s", buf.String())
	}
	if lag["1"] != "-" || lag["2"] != "0.00" || lag["3"] != "1.50" {
		t.Errorf("lag p99 ms cells %v, want round 1 (closed) -, 2 0.00, 3 1.50:\n%s", lag, buf.String())
	}
	if wait["1"] != "-" || wait["2"] != "12.50" || wait["3"] != "0.00" {
		t.Errorf("wait p99 ms cells %v, want round 1 (closed) -, 2 12.50, 3 0.00:\n%s", wait, buf.String())
	}
}
