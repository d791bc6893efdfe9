package cost

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// RoomReport is a room measurement: every phase of every pass, the median
// of each phase over the passes, and the ratios the room's targets name.
// In a phase, "buys" are its 2xx replies (joins, place reads or buys) and
// every figure "per buy" is per 2xx reply.
type RoomReport struct {
	Bin       string  `json:"bin"`
	Redis     string  `json:"redis"`
	Database  string  `json:"database"`   // created and dropped by the run
	KeyPrefix string  `json:"key_prefix"` // its keys, removed at its end
	Conns     int     `json:"conns"`
	DurationS float64 `json:"duration_s"`
	Waiting   int     `json:"waiting"`   // buyers joined to the line before its joins
	Admitted  int     `json:"admitted"`  // buyers of each admitted-buy load
	ReadRate  float64 `json:"read_rate"` // the background's place reads/s
	BuyRate   float64 `json:"buy_rate"`  // the open phases' buys/s (0: none ran)
	// Phases is every pass's phases, in the order they ran.
	Phases  []RoomPhase `json:"phases"`
	Medians []RoomPhase `json:"medians"` // per phase over the passes, Round 0
	Ratios  []RoomRatio `json:"ratios"`
}

// RoomPhase is one measured load of a pass.
type RoomPhase struct {
	Phase string `json:"phase"` // PhasePlainBuys ...
	Result
	Background *Background `json:"background,omitempty"` // the loaded phases'
}

// Sells reports whether the phase's requests are buys (whose orders the
// database must hold).
func (p RoomPhase) Sells() bool {
	switch p.Phase {
	case PhasePlainBuys, PhaseAdmittedBuys, PhaseAdmittedBuysLoaded, PhasePlainBuysLoaded, PhaseAdmittedBuysOpen, PhasePlainBuysOpen:
		return true
	}
	return false
}

// Background is the place reads that ran beside a loaded phase, an open
// loop (its latencies from each read's scheduled send).
type Background struct {
	RateAsked float64 `json:"rate_asked"`
	// RoomWaiting is the waiting buyers of the room read when it started
	// (GET /v1/admin/sales/{sale}/queue), -1 when not known.
	RoomWaiting int64   `json:"room_waiting"`
	Sent        int     `json:"sent"`
	Status2xx   int     `json:"status_2xx"`
	Non2xx      int     `json:"non_2xx"`
	Errors      int     `json:"errors"`
	SendRate    float64 `json:"send_rate"`
	P50MS       float64 `json:"p50_ms"`
	P99MS       float64 `json:"p99_ms"`
	LagP99MS    float64 `json:"lag_p99_ms"`
}

// problems says what made the background other than asked: reads sent
// more than a tenth below its rate (the service, or the generator, did not
// keep up: the phase beside it ran on a saturated machine), reads refused
// or unanswered.
func (b *Background) problems() []string {
	var out []string
	if b.RateAsked > 0 && b.SendRate < 0.9*b.RateAsked {
		out = append(out, fmt.Sprintf("the background place reads were sent at %.0f/s of the %.0f/s asked (p99 %.0f ms): the service did not keep up with them beside this load",
			b.SendRate, b.RateAsked, b.P99MS))
	}
	if b.Non2xx > 0 || b.Errors > 0 {
		out = append(out, fmt.Sprintf("%d background place reads non-2xx, %d without a reply", b.Non2xx, b.Errors))
	}
	return out
}

// RoomRatio is one ratio of phases' medians, with the room's target for
// it, if it has one. Value 0: a phase it needs was not measured.
type RoomRatio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Target is "<op> <bound>" (op one of >=, <, <=), empty for a ratio
	// shown to explain another.
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"` // nil: no target, or not measured
}

// summarize computes the medians per phase and the ratios.
func (rep RoomReport) summarize() RoomReport {
	rep.Medians = nil
	byPhase := map[string]*Result{}
	for _, ph := range roomPhases {
		var rs []*Result
		var bgs []*Background
		for i := range rep.Phases {
			if rep.Phases[i].Phase == ph.name {
				rs = append(rs, &rep.Phases[i].Result)
				if b := rep.Phases[i].Background; b != nil {
					bgs = append(bgs, b)
				}
			}
		}
		if len(rs) == 0 {
			continue
		}
		m := RoomPhase{Phase: ph.name, Result: medianOf(rs), Background: medianBackground(bgs)}
		m.Build, m.Round = rs[0].Build, 0
		rep.Medians = append(rep.Medians, m)
		byPhase[ph.name] = &rep.Medians[len(rep.Medians)-1].Result
	}
	rep.Ratios = roomRatios(byPhase)
	return rep
}

// medianBackground is the median of each figure of bs, nil of none.
func medianBackground(bs []*Background) *Background {
	if len(bs) == 0 {
		return nil
	}
	m := func(get func(*Background) float64) float64 {
		vs := make([]float64, len(bs))
		for i, b := range bs {
			vs[i] = get(b)
		}
		return median(vs)
	}
	return &Background{
		RateAsked:   bs[0].RateAsked,
		RoomWaiting: int64(m(func(b *Background) float64 { return float64(b.RoomWaiting) })),
		Sent:        int(m(func(b *Background) float64 { return float64(b.Sent) })),
		Status2xx:   int(m(func(b *Background) float64 { return float64(b.Status2xx) })),
		Non2xx:      int(m(func(b *Background) float64 { return float64(b.Non2xx) })),
		Errors:      int(m(func(b *Background) float64 { return float64(b.Errors) })),
		SendRate:    m(func(b *Background) float64 { return b.SendRate }),
		P50MS:       m(func(b *Background) float64 { return b.P50MS }),
		P99MS:       m(func(b *Background) float64 { return b.P99MS }),
		LagP99MS:    m(func(b *Background) float64 { return b.LagP99MS }),
	}
}

// roomRatios are the ratios of the phases' medians (by phase name): the
// four the room's targets name first (joins, place reads, and an admitted
// buy's p99 against a plain buy's under the same load, closed and open),
// then those that explain them.
func roomRatios(m map[string]*Result) []RoomRatio {
	get := func(phase string, f func(*Result) float64) float64 {
		if r := m[phase]; r != nil {
			return f(r)
		}
		return 0
	}
	rate := func(r *Result) float64 { return r.BuysPerS }
	cpu := func(r *Result) float64 { return r.TotalUS }
	p99 := func(r *Result) float64 { return r.P99MS }
	ratio := func(name, target string, num, den float64) RoomRatio {
		r := RoomRatio{Name: name, Value: ratioOf(num, den), Target: target}
		if target != "" && num > 0 && den > 0 {
			met := meets(r.Value, target)
			r.Met = &met
		}
		return r
	}
	return []RoomRatio{
		ratio("joins/s ÷ plain buys/s", ">= 1", get(PhaseJoins, rate), get(PhasePlainBuys, rate)),
		ratio("place-read CPU ÷ plain buy CPU (total µs)", "< 1", get(PhasePlaceReads, cpu), get(PhasePlainBuys, cpu)),
		ratio("admitted-buy p99 ÷ plain buy p99, closed loops, the same reads beside both", "<= 1.2",
			get(PhaseAdmittedBuysLoaded, p99), get(PhasePlainBuysLoaded, p99)),
		ratio("admitted-buy p99 ÷ plain buy p99, open loops at one rate, the same reads beside both", "<= 1.2",
			get(PhaseAdmittedBuysOpen, p99), get(PhasePlainBuysOpen, p99)),
		ratio("admitted-buy p99 ÷ plain buy p99, closed loops, no reads", "", get(PhaseAdmittedBuys, p99), get(PhasePlainBuys, p99)),
		ratio("admitted-buy p99, reads beside ÷ plain buy p99, no reads", "", get(PhaseAdmittedBuysLoaded, p99), get(PhasePlainBuys, p99)),
		ratio("plain-buy p99, reads beside ÷ plain buy p99, no reads", "", get(PhasePlainBuysLoaded, p99), get(PhasePlainBuys, p99)),
		ratio("admitted-buy CPU ÷ plain buy CPU (total µs)", "", get(PhaseAdmittedBuys, cpu), get(PhasePlainBuys, cpu)),
		ratio("admitted buys/s ÷ plain buys/s", "", get(PhaseAdmittedBuys, rate), get(PhasePlainBuys, rate)),
	}
}

// meets reports whether v meets target ("<op> <bound>").
func meets(v float64, target string) bool {
	var op string
	var bound float64
	if _, err := fmt.Sscanf(target, "%s %g", &op, &bound); err != nil {
		return false
	}
	switch op {
	case ">=":
		return v >= bound
	case ">":
		return v > bound
	case "<=":
		return v <= bound
	case "<":
		return v < bound
	}
	return false
}

// PrintRoomJSON writes the report as one JSON document.
func PrintRoomJSON(w io.Writer, rep RoomReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// roomColumns are the figures of the room's table, by their heads in
// columns.
var roomColumns = []string{"buys/s", "service µs", "Redis µs", "PG µs", "total µs", "load µs", "p50 ms", "p99 ms", "idle %", "non-2xx", "catch-up s"}

// PrintRoomText writes the report: a row per phase and pass, the medians,
// the ratios with their targets, the background reads and any problem.
func PrintRoomText(w io.Writer, rep RoomReport) {
	fmt.Fprintf(w, "serve: %s\nredis: %s\n", rep.Bin, rep.Redis)
	fmt.Fprintf(w, "load: each phase a closed loop of %d connections for %gs (an admitted-buy phase ends sooner once its %d admitted buyers have bought);\n",
		rep.Conns, rep.DurationS, rep.Admitted)
	fmt.Fprintf(w, "the line's room holds %d buyers before its joins are measured, and every joiner after; background: place reads at %.0f/s of the line's buyers\n",
		rep.Waiting, rep.ReadRate)
	if rep.BuyRate > 0 {
		fmt.Fprintf(w, "the open phases: buys at %.0f/s, an open loop (latency from each request's scheduled send), beside the same background\n", rep.BuyRate)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	heads := []string{"pass", "phase"}
	for _, h := range roomColumns {
		if h == "buys/s" {
			h = "req/s"
		}
		heads = append(heads, h)
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t")+"\t")
	row := func(pass string, p *RoomPhase) {
		cells := []string{pass, p.Phase}
		for _, h := range roomColumns {
			for _, c := range columns {
				if c.head != h {
					continue
				}
				v := c.get(&p.Result)
				switch {
				case v == 0 && (strings.Contains(h, "µs") || h == "catch-up s"):
					cells = append(cells, "-")
				default:
					cells = append(cells, fmt.Sprintf(c.format, v))
				}
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	for i := range rep.Phases {
		row(fmt.Sprint(rep.Phases[i].Round), &rep.Phases[i])
	}
	if len(rep.Phases) > len(rep.Medians) {
		for i := range rep.Medians {
			row("median", &rep.Medians[i])
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "\nreq/s: 2xx replies per second; µs: CPU per 2xx reply (service /proc, Redis INFO cpu, PostgreSQL's processes), for buys until the database holds their orders.")
	fmt.Fprintln(w, "The loaded phases' µs include the background reads' CPU (the same processes serve both); load µs is this generator's, per request of the phase.")

	fmt.Fprintln(w, "\nratios (medians):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rep.Ratios {
		value, verdict := "-", ""
		if r.Value > 0 {
			value = fmt.Sprintf("%.2f", r.Value)
		}
		if r.Target != "" {
			verdict = verdictOf(r.Target, r.Met, "MISSED")
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.Name, value, verdict)
	}
	tw.Flush()

	for _, p := range rep.Phases {
		if b := p.Background; b != nil {
			waiting := "?"
			if b.RoomWaiting >= 0 {
				waiting = fmt.Sprint(b.RoomWaiting)
			}
			fmt.Fprintf(w, "pass %d %s: background place reads sent at %.0f/s of %.0f asked, on a room of %s waiting; %d 2xx, %d non-2xx, %d errors; p50 %.2f ms, p99 %.2f ms, send lag p99 %.2f ms\n",
				p.Round, p.Phase, b.SendRate, b.RateAsked, waiting, b.Status2xx, b.Non2xx, b.Errors, b.P50MS, b.P99MS, b.LagP99MS)
		}
	}
	printRoomCommands(w, rep)
	for _, p := range rep.Phases {
		for _, pr := range p.Problems {
			fmt.Fprintf(w, "pass %d %s: %s\n", p.Round, p.Phase, pr)
		}
	}
}

// printRoomCommands writes, per phase (medians), the Redis commands that
// took most of its time: calls and usec per 2xx reply.
func printRoomCommands(w io.Writer, rep RoomReport) {
	if !slices.ContainsFunc(rep.Medians, func(m RoomPhase) bool { return len(m.Commands) > 0 }) {
		return
	}
	fmt.Fprintln(w, "\nRedis commands per 2xx reply, medians, most usec first (commandstats; a script's commands count inside its EVALSHA too):")
	for _, m := range rep.Medians {
		if len(m.Commands) == 0 {
			continue
		}
		var parts []string
		for _, c := range m.Commands[:min(len(m.Commands), 5)] {
			parts = append(parts, fmt.Sprintf("%s %.2f× %.2f µs", c.Name, c.CallsPerBuy, c.USPerBuy))
		}
		fmt.Fprintf(w, "  %s: %s\n", m.Phase, strings.Join(parts, ", "))
	}
}
