package cost

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Result is one round of one build. CPU figures are microseconds per
// accepted buy (2xx reply) of the measured load, over the window from its
// start until the database held every accepted order.
type Result struct {
	Build     string  `json:"build"` // "A" or "B"
	Bin       string  `json:"bin"`
	Round     int     `json:"round"`
	Database  string  `json:"database"`             // created and dropped by the round
	KeyPrefix string  `json:"key_prefix"`           // its keys, removed at its end
	Load      string  `json:"load"`                 // "closed" or "open"
	RateAsked float64 `json:"rate_asked,omitempty"` // open loop's requests/s
	Sent      int     `json:"sent"`
	Buys      int     `json:"buys"` // 2xx replies
	Non2xx    int     `json:"non_2xx"`
	Errors    int     `json:"errors"` // requests without a reply
	DurationS float64 `json:"duration_s"`
	BuysPerS  float64 `json:"buys_per_s"`

	ServiceUS     float64 `json:"service_us_per_buy"`
	RedisUS       float64 `json:"redis_us_per_buy"`
	PostgresUS    float64 `json:"postgres_us_per_buy"`     // the round database's backends + background processes
	PostgresAllUS float64 `json:"postgres_all_us_per_buy"` // every process of the server
	TotalUS       float64 `json:"total_us_per_buy"`        // service + Redis + PostgreSQL (ours)
	// LoadUS is the load generator's (this process's) CPU per request sent,
	// over the load alone: what the measurement takes from the same cores.
	LoadUS float64 `json:"load_us_per_request"`

	EvalshaCalls    int64   `json:"evalsha_calls"`
	BuysPerEvalsha  float64 `json:"buys_per_evalsha"`
	EvalshaUSPerBuy float64 `json:"evalsha_us_per_buy"` // commandstats usec of EVALSHA per buy
	// RedisInBytes and RedisOutBytes are what Redis's clients sent it and
	// were sent per buy (total_net_input_bytes, total_net_output_bytes).
	RedisInBytes  float64 `json:"redis_in_bytes_per_buy"`
	RedisOutBytes float64 `json:"redis_out_bytes_per_buy"`
	// Commands is every command Redis ran in the window (INFO
	// commandstats), most usec per buy first.
	Commands []CommandCost `json:"redis_commands,omitempty"`

	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
	// LagP99MS is the open loop's send lag p99 (loadgen.Report.SendLagMS):
	// how far behind its schedule the generator sent; 0 for a closed loop.
	LagP99MS float64 `json:"lag_p99_ms,omitempty"`
	// WaitP99MS is the open loop's wait for a free connection p99
	// (loadgen.Report.ConnWaitMS, over every send): requests due while
	// every connection carried one. Their latencies count the wait; this
	// column says how much of a p99 it was.
	WaitP99MS float64 `json:"conn_wait_p99_ms,omitempty"`
	// IdlePct and StealPct are the machine's idle and stolen time (its
	// /proc/stat, every CPU) over the same window as the CPU per buy, in
	// per cent of all its CPUs' time: what the round left unused, and
	// what a virtual machine's hypervisor took for others. A latency
	// measured with little idle was measured on a saturated machine; with
	// steal, in part on CPUs that were not running at all.
	IdlePct  float64 `json:"machine_idle_pct"`
	StealPct float64 `json:"machine_steal_pct"`

	// Closed is, for an open loop at a fraction of the closed loop's rate
	// (Config.OpenFraction), that closed loop, measured in the same round
	// just before it the same way; ClosedTotalUS its total µs per buy and
	// OpenOverClosed the open loop's total over it.
	Closed         *Result `json:"closed_loop,omitempty"`
	ClosedTotalUS  float64 `json:"closed_total_us_per_buy,omitempty"`
	OpenOverClosed float64 `json:"open_over_closed_total,omitempty"`

	CatchUpS   float64  `json:"catch_up_s"`   // from the load's end until every order was in the database
	OrdersInDB int      `json:"orders_in_db"` // of the measured load
	Problems   []string `json:"problems,omitempty"`
}

// account fills the per-buy figures from the counters before and after the
// window.
func (r *Result) account(before, after snapshot, pg func() (ours, all float64)) {
	r.ServiceUS = perBuy(ticksToMicros(after.serviceTicks-before.serviceTicks), r.Buys)
	d := after.redis.sub(before.redis)
	r.RedisUS = perBuy(d.CPUMicros, r.Buys)
	ours, all := pg()
	r.PostgresUS, r.PostgresAllUS = perBuy(ours, r.Buys), perBuy(all, r.Buys)
	r.TotalUS = r.ServiceUS + r.RedisUS + r.PostgresUS
	var machineOK bool
	if r.IdlePct, r.StealPct, machineOK = before.machine.shares(after.machine); !machineOK {
		r.Problems = append(r.Problems, fmt.Sprintf("idle %% and steal %% not measured (0): /proc/stat's cpu counters went back or stood still "+
			"(%d ticks in all, %d idle, %d stolen, from the window's start to its end)",
			after.machine.total-before.machine.total, after.machine.idle-before.machine.idle, after.machine.steal-before.machine.steal))
	}
	r.EvalshaCalls = d.EvalshaCalls
	if d.EvalshaCalls > 0 {
		r.BuysPerEvalsha = float64(r.Buys) / float64(d.EvalshaCalls)
	}
	r.EvalshaUSPerBuy = perBuy(float64(d.EvalshaMicros), r.Buys)
	r.RedisInBytes, r.RedisOutBytes = perBuy(float64(d.NetIn), r.Buys), perBuy(float64(d.NetOut), r.Buys)
	r.Commands = nil
	if r.Buys > 0 {
		for name, c := range d.Commands {
			r.Commands = append(r.Commands, CommandCost{Name: name, CallsPerBuy: perBuy(float64(c.Calls), r.Buys),
				USPerBuy: perBuy(float64(c.Micros), r.Buys)})
		}
	}
	sortCommands(r.Commands)
}

// CommandCost is one Redis command's share of a buy: its calls and its
// commandstats usec (time inside Redis, not counting what the network and
// the event loop take around it) per accepted buy. A script's commands
// count under their own names as well as inside its EVALSHA.
type CommandCost struct {
	Name        string  `json:"name"`
	CallsPerBuy float64 `json:"calls_per_buy"`
	USPerBuy    float64 `json:"us_per_buy"`
}

// sortCommands orders cs by usec per buy, most first, then by name.
func sortCommands(cs []CommandCost) {
	slices.SortFunc(cs, func(a, b CommandCost) int {
		switch {
		case a.USPerBuy > b.USPerBuy:
			return -1
		case a.USPerBuy < b.USPerBuy:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// medianCommands is, per command any of rs ran, the median over rs of its
// calls and usec per buy (a round that did not run it counts 0).
func medianCommands(rs []*Result) []CommandCost {
	names := map[string]bool{}
	for _, r := range rs {
		for _, c := range r.Commands {
			names[c.Name] = true
		}
	}
	var out []CommandCost
	for name := range names {
		calls, us := make([]float64, len(rs)), make([]float64, len(rs))
		for i, r := range rs {
			for _, c := range r.Commands {
				if c.Name == name {
					calls[i], us[i] = c.CallsPerBuy, c.USPerBuy
				}
			}
		}
		out = append(out, CommandCost{Name: name, CallsPerBuy: median(calls), USPerBuy: median(us)})
	}
	sortCommands(out)
	return out
}

// Report is a whole measurement: every round, and per build the median of
// each figure over its rounds; with two builds, B's medians over A's.
type Report struct {
	Builds       []string `json:"builds"`
	Redis        string   `json:"redis"` // the address measured, and whether it is the run's own
	Conns        int      `json:"conns"`
	DurationS    float64  `json:"duration_s"`
	OpenRate     float64  `json:"open_rate,omitempty"`
	OpenFraction float64  `json:"open_fraction,omitempty"`
	Results      []Result `json:"rounds"`
	Medians      []Result `json:"medians"`             // one per build measured, Round 0
	RatioBA      *Result  `json:"ratio_b_a,omitempty"` // each figure of B's median over A's
	// Refs are the floor's and the seeds' script's figures and each
	// build's ratios to them; nil when not asked for (Config.Refs).
	Refs *References `json:"references,omitempty"`
}

// column is one numeric figure of a Result.
type column struct {
	head   string
	format string
	get    func(*Result) float64
	set    func(*Result, float64)
}

var columns = []column{
	{"buys/s", "%.0f", func(r *Result) float64 { return r.BuysPerS }, func(r *Result, v float64) { r.BuysPerS = v }},
	{"service µs", "%.1f", func(r *Result) float64 { return r.ServiceUS }, func(r *Result, v float64) { r.ServiceUS = v }},
	{"Redis µs", "%.1f", func(r *Result) float64 { return r.RedisUS }, func(r *Result, v float64) { r.RedisUS = v }},
	{"PG µs", "%.1f", func(r *Result) float64 { return r.PostgresUS }, func(r *Result, v float64) { r.PostgresUS = v }},
	{"total µs", "%.1f", func(r *Result) float64 { return r.TotalUS }, func(r *Result, v float64) { r.TotalUS = v }},
	{"load µs", "%.1f", func(r *Result) float64 { return r.LoadUS }, func(r *Result, v float64) { r.LoadUS = v }},
	{"PG all µs", "%.1f", func(r *Result) float64 { return r.PostgresAllUS }, func(r *Result, v float64) { r.PostgresAllUS = v }},
	{"EVALSHA", "%.0f", func(r *Result) float64 { return float64(r.EvalshaCalls) }, func(r *Result, v float64) { r.EvalshaCalls = int64(math.Round(v)) }},
	{"buys/call", "%.1f", func(r *Result) float64 { return r.BuysPerEvalsha }, func(r *Result, v float64) { r.BuysPerEvalsha = v }},
	{"EVALSHA µs", "%.1f", func(r *Result) float64 { return r.EvalshaUSPerBuy }, func(r *Result, v float64) { r.EvalshaUSPerBuy = v }},
	{"Redis in B", "%.0f", func(r *Result) float64 { return r.RedisInBytes }, func(r *Result, v float64) { r.RedisInBytes = v }},
	{"Redis out B", "%.0f", func(r *Result) float64 { return r.RedisOutBytes }, func(r *Result, v float64) { r.RedisOutBytes = v }},
	{"p50 ms", "%.2f", func(r *Result) float64 { return r.P50MS }, func(r *Result, v float64) { r.P50MS = v }},
	{"p99 ms", "%.2f", func(r *Result) float64 { return r.P99MS }, func(r *Result, v float64) { r.P99MS = v }},
	{"lag p99 ms", "%.2f", func(r *Result) float64 { return r.LagP99MS }, func(r *Result, v float64) { r.LagP99MS = v }},
	{"wait p99 ms", "%.2f", func(r *Result) float64 { return r.WaitP99MS }, func(r *Result, v float64) { r.WaitP99MS = v }},
	{"idle %", "%.1f", func(r *Result) float64 { return r.IdlePct }, func(r *Result, v float64) { r.IdlePct = v }},
	{"steal %", "%.1f", func(r *Result) float64 { return r.StealPct }, func(r *Result, v float64) { r.StealPct = v }},
	{"non-2xx", "%.0f", func(r *Result) float64 { return float64(r.Non2xx + r.Errors) }, func(r *Result, v float64) { r.Non2xx = int(math.Round(v)) }},
	{"catch-up s", "%.2f", func(r *Result) float64 { return r.CatchUpS }, func(r *Result, v float64) { r.CatchUpS = v }},
	{"closed µs", "%.1f", func(r *Result) float64 { return r.ClosedTotalUS }, func(r *Result, v float64) { r.ClosedTotalUS = v }},
	{"open/closed", "%.2f", func(r *Result) float64 { return r.OpenOverClosed }, func(r *Result, v float64) { r.OpenOverClosed = v }},
}

// summarize computes the medians and the ratio.
func (rep Report) summarize() Report {
	rep.Medians, rep.RatioBA = nil, nil
	for i := range rep.Builds {
		build := string(rune('A' + i))
		var rs []*Result
		for j := range rep.Results {
			if rep.Results[j].Build == build {
				rs = append(rs, &rep.Results[j])
			}
		}
		if len(rs) == 0 {
			continue
		}
		m := medianOf(rs)
		m.Build = build
		rep.Medians = append(rep.Medians, m)
	}
	if len(rep.Medians) == 2 {
		ratio := Result{Build: "B/A"}
		for _, c := range columns {
			c.set(&ratio, ratioOf(c.get(&rep.Medians[1]), c.get(&rep.Medians[0])))
		}
		ratio.EvalshaCalls = 0 // a count's ratio does not fit an int64; see buys/call
		rep.RatioBA = &ratio
	}
	rep.Refs = rep.Refs.summarize(rep.Medians)
	return rep
}

// medianOf is, for each figure, its median over rs (not empty), and the
// median of each Redis command's share; Bin and Load are rs[0]'s.
func medianOf(rs []*Result) Result {
	m := Result{Bin: rs[0].Bin, Load: rs[0].Load}
	for _, c := range columns {
		vs := make([]float64, len(rs))
		for k, r := range rs {
			vs[k] = c.get(r)
		}
		c.set(&m, median(vs))
	}
	m.Commands = medianCommands(rs)
	return m
}

// median of vs (the mean of the middle two when even); 0 of none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ratioOf is b/a, 0 when a is 0.
func ratioOf(b, a float64) float64 {
	if a == 0 {
		return 0
	}
	return b / a
}

// PrintJSON writes the report as one JSON document.
func PrintJSON(w io.Writer, rep Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// PrintText writes the report as a table: a row per round and build, then
// the medians and B/A.
func PrintText(w io.Writer, rep Report) {
	for i, b := range rep.Builds {
		fmt.Fprintf(w, "build %c: %s serve\n", 'A'+i, b)
	}
	load := fmt.Sprintf("closed loop, %d connections", rep.Conns)
	switch {
	case rep.OpenRate > 0:
		load = fmt.Sprintf("open loop at %.0f/s", rep.OpenRate)
	case rep.OpenFraction > 0:
		load = fmt.Sprintf("open loop at %.2f of each round's closed-loop buys/s", rep.OpenFraction)
	}
	fmt.Fprintf(w, "redis: %s\n", rep.Redis)
	fmt.Fprintf(w, "load: %s for %gs, a fresh buyer per request; CPU per accepted buy, until the database holds every order\n\n", load, rep.DurationS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	heads := []string{"round", "build"}
	for _, c := range columns {
		heads = append(heads, c.head)
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t")+"\t")
	row := func(label, build string, r *Result, ratio bool) {
		cells := []string{label, build}
		for _, c := range columns {
			v := c.get(r)
			switch {
			case ratio && c.head == "EVALSHA":
				cells = append(cells, "")
			case ratio && v == 0:
				cells = append(cells, "-")
			case ratio:
				cells = append(cells, fmt.Sprintf("%.2f", v))
			case (c.head == "lag p99 ms" || c.head == "wait p99 ms") && r.Load != "open": // a closed loop has no schedule
				cells = append(cells, "-")
			case v == 0 && (strings.Contains(c.head, "µs") || c.head == "open/closed"):
				cells = append(cells, "-")
			default:
				cells = append(cells, fmt.Sprintf(c.format, v))
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	for i := range rep.Results {
		r := &rep.Results[i]
		row(fmt.Sprint(r.Round), r.Build, r, false)
	}
	for i := range rep.Medians {
		row("median", rep.Medians[i].Build, &rep.Medians[i], false)
	}
	if rep.RatioBA != nil {
		row("ratio", "B/A", rep.RatioBA, true)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nµs: CPU per buy. PG: the round database's backends and PostgreSQL's background processes; PG all: every postgres process (other clients' too).")
	fmt.Fprintln(w, "Redis and PG are server-wide counters: other work on a shared server shows in them. EVALSHA µs: commandstats usec per buy.")
	fmt.Fprintln(w, "Redis in/out B: bytes its clients sent it / it sent them, per buy.")
	fmt.Fprintln(w, "idle %, steal %: the whole machine's idle time and the time its hypervisor took for others (/proc/stat), in per cent of all its CPUs', over the same window.")
	fmt.Fprintln(w, "Open loop: lag p99 ms, how far the generator sent behind its schedule; wait p99 ms, how long due requests waited for a free connection (both count in the latencies, from each request's scheduled send).")
	if rep.OpenFraction > 0 {
		fmt.Fprintln(w, "closed µs: total CPU per buy of the closed loop that set the round's rate, measured just before its open loop the same way; open/closed: the open loop's total over it.")
	}
	printRefs(w, rep)
	printCommands(w, rep)
	for _, r := range rep.Results {
		if r.Load == "open" && rep.OpenFraction > 0 {
			fmt.Fprintf(w, "round %d build %s: open loop at %.0f/s", r.Round, r.Build, r.RateAsked)
			if c := r.Closed; c != nil {
				fmt.Fprintf(w, "; its closed loop: %.0f buys/s, service %.1f µs, Redis %.1f, PG %.1f, %.1f buys/call, p99 %.2f ms",
					c.BuysPerS, c.ServiceUS, c.RedisUS, c.PostgresUS, c.BuysPerEvalsha, c.P99MS)
			}
			fmt.Fprintln(w)
		}
		for _, p := range r.Problems {
			fmt.Fprintf(w, "round %d build %s: %s\n", r.Round, r.Build, p)
		}
	}
}

// printCommands writes, per build, the medians of each Redis command's
// calls and usec per buy (INFO commandstats), the commands of A's buy
// script included (they run inside its EVALSHA and count in both).
func printCommands(w io.Writer, rep Report) {
	if len(rep.Medians) == 0 {
		return
	}
	names := []string{}
	seen := map[string]bool{}
	for _, m := range rep.Medians {
		for _, c := range m.Commands {
			if !seen[c.Name] {
				seen[c.Name] = true
				names = append(names, c.Name)
			}
		}
	}
	if len(names) == 0 {
		return
	}
	fmt.Fprintln(w, "\nRedis commands per buy, medians (commandstats; a script's commands count inside its EVALSHA too):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	heads := []string{"command"}
	for _, m := range rep.Medians {
		heads = append(heads, m.Build+" calls", m.Build+" µs")
	}
	if len(rep.Medians) == 2 {
		heads = append(heads, "B/A µs")
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t")+"\t")
	for _, name := range names {
		cells := []string{name}
		var us []float64
		for _, m := range rep.Medians {
			var c CommandCost
			for _, x := range m.Commands {
				if x.Name == name {
					c = x
				}
			}
			cells = append(cells, fmt.Sprintf("%.4f", c.CallsPerBuy), fmt.Sprintf("%.2f", c.USPerBuy))
			us = append(us, c.USPerBuy)
		}
		if len(us) == 2 {
			if us[0] == 0 {
				cells = append(cells, "-")
			} else {
				cells = append(cells, fmt.Sprintf("%.2f", us[1]/us[0]))
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	tw.Flush()
}
