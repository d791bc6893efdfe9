package cost

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// References are the floor's and the seeds' script's figures, a row per
// round, their medians, and each build's ratios to them: the performance
// targets.
type References struct {
	Floor []FloorResult `json:"floor"`
	// Seed is empty when redis-benchmark could not run (Problems says why).
	Seed        []SeedResult `json:"seed,omitempty"`
	FloorMedian *FloorResult `json:"floor_median,omitempty"` // Round 0
	SeedMedian  *SeedResult  `json:"seed_median,omitempty"`  // Round 0
	Ratios      []RefRatio   `json:"ratios"`
	Problems    []string     `json:"problems,omitempty"` // a reference not measured, and why
}

// FloorResult is one round's floor: CPU µs of its process per 2xx reply
// under the rounds' closed loop.
type FloorResult struct {
	Round     int      `json:"round"`
	Sent      int      `json:"sent"`
	Requests  int      `json:"requests"` // 2xx replies
	Non2xx    int      `json:"non_2xx"`
	Errors    int      `json:"errors"`
	DurationS float64  `json:"duration_s"`
	PerS      float64  `json:"requests_per_s"`
	FloorUS   float64  `json:"us_per_request"`
	P50MS     float64  `json:"p50_ms"`
	P99MS     float64  `json:"p99_ms"`
	Problems  []string `json:"problems,omitempty"`
}

// SeedResult is one round's seeds' script under redis-benchmark.
type SeedResult struct {
	Round       int     `json:"round"`
	KeyPrefix   string  `json:"key_prefix"` // its keys, {prefix}:..., removed at its end
	Unpipelined SeedRun `json:"unpipelined"`
	Pipelined   SeedRun `json:"pipelined"`
}

// SeedRun is one redis-benchmark run of the seeds' script: Redis's CPU
// (INFO cpu) and EVALSHA's commandstats usec per call Redis counted.
type SeedRun struct {
	Clients   int     `json:"clients"`  // -c
	Pipeline  int     `json:"pipeline"` // -P
	Calls     int64   `json:"calls"`
	DurationS float64 `json:"duration_s"`
	CallsPerS float64 `json:"calls_per_s"`
	RedisUS   float64 `json:"redis_us_per_call"`
	EvalshaUS float64 `json:"evalsha_us_per_call"`
}

// RefRatio is one build's median figure over a reference's median.
type RefRatio struct {
	Build string  `json:"build"`
	Name  string  `json:"name"`
	Value float64 `json:"value"` // 0: not measured
	// Target is "<op> <bound>" (meets), empty for a ratio shown to
	// explain another.
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"` // nil: no target, or not measured
}

// The ratios' names.
const (
	RatioServiceFloor     = "service µs per buy ÷ floor µs per request"
	RatioRedisPipelined   = "Redis µs per buy ÷ seeds' script µs per call, pipelined (-P 16)"
	RatioRedisUnpipelined = "Redis µs per buy ÷ seeds' script µs per call, unpipelined (-c 50)"
)

// summarize computes the references' medians and each build's ratios to
// them (medians: one per build measured).
func (refs *References) summarize(medians []Result) *References {
	if refs == nil {
		return nil
	}
	out := *refs
	out.FloorMedian, out.SeedMedian, out.Ratios = nil, nil, nil
	if len(refs.Floor) > 0 {
		f := FloorResult{}
		f.PerS = median(collect(refs.Floor, func(f FloorResult) float64 { return f.PerS }))
		f.FloorUS = median(collect(refs.Floor, func(f FloorResult) float64 { return f.FloorUS }))
		f.P50MS = median(collect(refs.Floor, func(f FloorResult) float64 { return f.P50MS }))
		f.P99MS = median(collect(refs.Floor, func(f FloorResult) float64 { return f.P99MS }))
		out.FloorMedian = &f
	}
	if len(refs.Seed) > 0 {
		run := func(get func(SeedResult) SeedRun) SeedRun {
			first := get(refs.Seed[0])
			return SeedRun{Clients: first.Clients, Pipeline: first.Pipeline,
				CallsPerS: median(collect(refs.Seed, func(s SeedResult) float64 { return get(s).CallsPerS })),
				RedisUS:   median(collect(refs.Seed, func(s SeedResult) float64 { return get(s).RedisUS })),
				EvalshaUS: median(collect(refs.Seed, func(s SeedResult) float64 { return get(s).EvalshaUS }))}
		}
		out.SeedMedian = &SeedResult{Unpipelined: run(func(s SeedResult) SeedRun { return s.Unpipelined }),
			Pipelined: run(func(s SeedResult) SeedRun { return s.Pipelined })}
	}
	var floorUS, pipelinedUS, unpipelinedUS float64
	if out.FloorMedian != nil {
		floorUS = out.FloorMedian.FloorUS
	}
	if out.SeedMedian != nil {
		pipelinedUS, unpipelinedUS = out.SeedMedian.Pipelined.RedisUS, out.SeedMedian.Unpipelined.RedisUS
	}
	for _, m := range medians {
		out.Ratios = append(out.Ratios,
			refRatio(m.Build, RatioServiceFloor, "<= 2", m.ServiceUS, floorUS),
			refRatio(m.Build, RatioRedisPipelined, "<= 1", m.RedisUS, pipelinedUS),
			refRatio(m.Build, RatioRedisUnpipelined, "", m.RedisUS, unpipelinedUS))
	}
	return &out
}

// refRatio is num/den, judged against target when both were measured.
func refRatio(build, name, target string, num, den float64) RefRatio {
	r := RefRatio{Build: build, Name: name, Target: target}
	if num > 0 && den > 0 {
		r.Value = num / den
		if target != "" {
			met := meets(r.Value, target)
			r.Met = &met
		}
	}
	return r
}

// collect is f of each of xs.
func collect[T any](xs []T, f func(T) float64) []float64 {
	vs := make([]float64, len(xs))
	for i, x := range xs {
		vs[i] = f(x)
	}
	return vs
}

// targetText is a target as the report shows it: "<= 2" is "≤ 2×".
func targetText(target string) string {
	r := strings.NewReplacer("<=", "≤", ">=", "≥")
	return r.Replace(target) + "×"
}

// verdictOf is how a report names a ratio's target and whether it was
// met (nil: not measured); notMet is the word for a miss.
func verdictOf(target string, met *bool, notMet string) string {
	switch {
	case met == nil:
		return "target " + target + ": not measured"
	case *met:
		return "target " + target + ": met"
	default:
		return "target " + target + ": " + notMet
	}
}

// printRefs writes the references, a row per round and their medians, and
// the ratios with their targets.
func printRefs(w io.Writer, rep Report) {
	refs := rep.Refs
	if refs == nil {
		return
	}
	fmt.Fprintln(w, "\nreferences, measured in this run once per round (before the builds in odd rounds, after them in even ones):")
	fmt.Fprintln(w, "  the floor: an HTTP server that checks each buyer's token with the service's verifier and answers a fixed order-shaped body,")
	fmt.Fprintln(w, "    nothing else, under the same closed loop (seckill bench --floor-serve); µs: its process's CPU per 2xx reply")
	fmt.Fprintln(w, "  the seeds' script: seed000.lua under redis-benchmark on the same Redis, -c 50 and -c 50 -P 16; µs: Redis's CPU per call (INFO cpu)")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tfloor req/s\tfloor µs\tp50 ms\tp99 ms\tseed -c 50 calls/s\tµs/call\tseed -P 16 calls/s\tµs/call\t")
	row := func(label string, f *FloorResult, s *SeedResult) {
		cells := []string{label, "-", "-", "-", "-", "-", "-", "-", "-"}
		if f != nil {
			cells[1], cells[2] = fmt.Sprintf("%.0f", f.PerS), usCell(f.FloorUS)
			cells[3], cells[4] = fmt.Sprintf("%.2f", f.P50MS), fmt.Sprintf("%.2f", f.P99MS)
		}
		if s != nil {
			cells[5], cells[6] = fmt.Sprintf("%.0f", s.Unpipelined.CallsPerS), usCell(s.Unpipelined.RedisUS)
			cells[7], cells[8] = fmt.Sprintf("%.0f", s.Pipelined.CallsPerS), usCell(s.Pipelined.RedisUS)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	rounds := max(len(refs.Floor), len(refs.Seed))
	for i := range rounds {
		var f *FloorResult
		var s *SeedResult
		if i < len(refs.Floor) {
			f = &refs.Floor[i]
		}
		if i < len(refs.Seed) {
			s = &refs.Seed[i]
		}
		round := 0
		switch {
		case f != nil:
			round = f.Round
		case s != nil:
			round = s.Round
		}
		row(fmt.Sprint(round), f, s)
	}
	if refs.FloorMedian != nil || refs.SeedMedian != nil {
		row("median", refs.FloorMedian, refs.SeedMedian)
	}
	tw.Flush()

	fmt.Fprintln(w, "\ntargets, each build's median over the references' medians:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range refs.Ratios {
		value, verdict := "-", ""
		if r.Value > 0 {
			value = fmt.Sprintf("%.2f×", r.Value)
		}
		if r.Target != "" {
			verdict = verdictOf(targetText(r.Target), r.Met, "not met")
		}
		if verdict == "" {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.Build, r.Name, value)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.Build, r.Name, value, verdict)
	}
	tw.Flush()
	for _, f := range refs.Floor {
		for _, p := range f.Problems {
			fmt.Fprintf(w, "round %d floor: %s\n", f.Round, p)
		}
	}
	for _, p := range refs.Problems {
		fmt.Fprintf(w, "references: %s\n", p)
	}
}

// usCell is µs as the tables show them: "-" when not measured.
func usCell(us float64) string {
	if us == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", us)
}
