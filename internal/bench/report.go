package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Machine is where a run ran.
type Machine struct {
	GOOS, GOARCH string
	CPUs         int
	Go           string
	// Redis and Database are the servers' versions ("Redis 7.0.15",
	// "PostgreSQL 15.20", "SQLite 3.50.4 (embedded, temp file)"), empty when
	// no approach of the run used them.
	Redis, Database         string
	RedisAddr, DatabaseAddr string
	RedisEmbedded           bool
	DatabaseEmbedded        bool
	// RedisNote and DatabaseNote say why an embedded store was used when
	// it was not asked for.
	RedisNote, DatabaseNote string
	// Schema is the PostgreSQL schema the run's tables lived in.
	Schema string
}

func (s *Stores) machine() Machine {
	m := Machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if s.Redis != nil {
		m.Redis, m.RedisAddr, m.RedisEmbedded, m.RedisNote = s.RedisVersion, s.RedisAddr, s.RedisEmbedded, s.RedisNote
	}
	if s.DB != nil {
		m.Database, m.DatabaseAddr, m.DatabaseEmbedded, m.DatabaseNote = s.DBVersion, s.DBAddr, s.DBEmbedded, s.DBNote
		m.Schema = s.Schema
	}
	return m
}

// retried names what an approach's retries are.
var retried = map[string]string{
	DBOptimisticLock: "version conflicts, each followed by a new read and UPDATE",
	RedisLock:        "lock acquisitions refused, each followed by a pause of about " + lockWait.String() + " and a new SET NX",
	RedisSegmented:   "empty segments passed over to the next one",
}

// PrintText writes the header, the table and the notes.
func PrintText(w io.Writer, rep Report) {
	cfg, m := rep.Config, rep.Machine
	fmt.Fprintf(w, "seckill bench: one hot item, %d clients at once, each buy is 1 unit for a distinct buyer\n", cfg.Concurrency)
	hw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(hw, "machine\t%s/%s, %d CPUs, %s\n", m.GOOS, m.GOARCH, m.CPUs, m.Go)
	if m.Redis != "" {
		fmt.Fprintf(hw, "redis\t%s\n", storeLine(m.Redis, m.RedisAddr, m.RedisEmbedded, m.RedisNote, "--redis URL"))
	}
	if m.Database != "" {
		line := storeLine(m.Database, m.DatabaseAddr, m.DatabaseEmbedded, m.DatabaseNote, "--db URL")
		if m.Schema != "" {
			line += " (schema " + m.Schema + ", dropped after)"
		}
		fmt.Fprintf(hw, "database\t%s\n", line)
	}
	if cfg.Stock == 0 {
		fmt.Fprintf(hw, "stock\tper approach: a %v calibration run measures its rate; stock = rate x %v; it runs until sold out (at most %v)\n",
			cfg.Calibration, cfg.Duration, 2*cfg.Duration+time.Second)
	} else {
		fmt.Fprintf(hw, "stock\t%d for every approach; each runs until sold out or for %v\n", cfg.Stock, cfg.Duration)
	}
	fmt.Fprintf(hw, "sold\tcounted in the store afterwards: sales log rows (database), sold counters (Redis), order events (engine)\n")
	if cfg.Rounds > 1 {
		fmt.Fprintf(hw, "rounds\t%d, interleaved (every approach, then every approach again); each row is the approach's median round\n", cfg.Rounds)
	}
	_ = hw.Flush()
	fmt.Fprintln(w)

	rows := [][]string{{"approach", "ops/s", "x best db", "p50 ms", "p99 ms", "max ms", "errors", "sold", "stock", "oversold", "time"}}
	timeLimited := false
	for _, r := range rep.Results {
		ratio := "-"
		if rep.BestDB() > 0 {
			ratio = formatRatio(rep.Ratio(r))
		}
		took := fmt.Sprintf("%.1fs", r.Elapsed.Seconds())
		if !r.SoldOut {
			took += "*"
			timeLimited = true
		}
		rows = append(rows, []string{r.Name, thousands(int64(math.Round(r.OpsPerSec()))), ratio,
			millis(r.P50), millis(r.P99), millis(r.Max), thousands(r.Errors), thousands(r.Sold), thousands(r.Stock),
			thousands(r.Oversold()), took})
	}
	writeTable(w, rows)

	var notes []string
	if timeLimited {
		notes = append(notes, "* stopped at the time limit before it sold out")
	}
	for _, r := range rep.Results {
		if r.Name == RedisNaive && r.Oversold() > 0 {
			notes = append(notes, fmt.Sprintf("%s oversold %d units (its stock ended at %d): clients that read the last units before anyone's DECRBY all sold them",
				r.Name, r.Oversold(), r.Remaining))
		}
		if r.Retries > 0 && retried[r.Name] != "" {
			notes = append(notes, fmt.Sprintf("%s: %s %s", r.Name, thousands(r.Retries), retried[r.Name]))
		}
		if r.Errors > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d errors, the first: %s", r.Name, r.Errors, r.FirstError))
		}
		if len(r.RoundOps) > 1 {
			var each []string
			for _, ops := range r.RoundOps {
				each = append(each, thousands(int64(math.Round(ops))))
			}
			notes = append(notes, fmt.Sprintf("%s: ops/s of each round %s", r.Name, strings.Join(each, ", ")))
		}
	}
	for _, b := range rep.Broken() {
		notes = append(notes, "FAILED: "+b)
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
	fmt.Fprintln(w)
	width := 0
	for _, r := range rep.Results {
		width = max(width, len(r.Name))
	}
	for _, r := range rep.Results {
		fmt.Fprintf(w, "%-*s  %s\n", width, r.Name, r.What)
	}
}

// writeTable writes rows in columns two spaces apart, the first column
// aligned left and the others right.
func writeTable(w io.Writer, rows [][]string) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len(cell))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-len(cell))
			if i == 0 {
				b.WriteString(cell + pad)
			} else {
				b.WriteString("  " + pad + cell)
			}
		}
		fmt.Fprintln(w, b.String())
	}
}

func storeLine(version, addr string, embedded bool, note, flag string) string {
	if embedded {
		if note == "" {
			return version
		}
		return fmt.Sprintf("%s: %s; pass %s for a real server", version, note, flag)
	}
	return version + " at " + addr
}

func millis(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64)
}

func formatRatio(x float64) string {
	if x >= 10 {
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

// thousands formats n with commas: 1234567 -> "1,234,567".
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// The JSON document of a run (--json).
type (
	jsonReport struct {
		Machine    jsonMachine    `json:"machine"`
		Settings   jsonSettings   `json:"settings"`
		Approaches []jsonApproach `json:"approaches"`
	}
	jsonMachine struct {
		GOOS             string `json:"goos"`
		GOARCH           string `json:"goarch"`
		CPUs             int    `json:"cpus"`
		Go               string `json:"go"`
		Redis            string `json:"redis,omitempty"`
		RedisEmbedded    bool   `json:"redis_embedded"`
		Database         string `json:"database,omitempty"`
		DatabaseEmbedded bool   `json:"database_embedded"`
	}
	jsonSettings struct {
		Concurrency int `json:"concurrency"`
		// StockSizing is "calibrated" (stock per approach = its calibrated
		// rate x duration) or "fixed" (--stock).
		StockSizing  string  `json:"stock_sizing"`
		DurationS    float64 `json:"duration_s"`
		CalibrationS float64 `json:"calibration_s,omitempty"`
		Segments     int     `json:"segments"`
		Batch        int     `json:"batch"`
		Rounds       int     `json:"rounds"`
	}
	jsonApproach struct {
		Name       string  `json:"name"`
		What       string  `json:"what"`
		OpsPerS    float64 `json:"ops_per_s"`
		P50Ms      float64 `json:"p50_ms"`
		P99Ms      float64 `json:"p99_ms"`
		MaxMs      float64 `json:"max_ms"`
		Errors     int64   `json:"errors"`
		Oversold   int64   `json:"oversold"`
		Sold       int64   `json:"sold"`
		Stock      int64   `json:"stock"`
		Remaining  int64   `json:"remaining"`
		Acked      int64   `json:"acked"`
		Retries    int64   `json:"retries"`
		ElapsedS   float64 `json:"elapsed_s"`
		SoldOut    bool    `json:"sold_out"`
		Consistent bool    `json:"consistent"`
		// RatioToBestDB is null when no database approach ran.
		RatioToBestDB *float64 `json:"ratio_to_best_db"`
		FirstError    string   `json:"first_error,omitempty"`
		// RoundsOpsPerS is every round's ops/s when there were several;
		// the rest is the median round's.
		RoundsOpsPerS []float64 `json:"rounds_ops_per_s,omitempty"`
	}
)

// PrintJSON writes the run as one JSON document.
func PrintJSON(w io.Writer, rep Report) error {
	cfg, m := rep.Config, rep.Machine
	doc := jsonReport{
		Machine: jsonMachine{GOOS: m.GOOS, GOARCH: m.GOARCH, CPUs: m.CPUs, Go: m.Go,
			Redis: m.Redis, RedisEmbedded: m.RedisEmbedded, Database: m.Database, DatabaseEmbedded: m.DatabaseEmbedded},
		Settings: jsonSettings{Concurrency: cfg.Concurrency, StockSizing: "fixed",
			DurationS: cfg.Duration.Seconds(), Segments: cfg.Segments, Batch: cfg.Batch, Rounds: max(cfg.Rounds, 1)},
		Approaches: []jsonApproach{},
	}
	if cfg.Stock == 0 {
		doc.Settings.StockSizing = "calibrated"
		doc.Settings.CalibrationS = cfg.Calibration.Seconds()
	}
	ms := func(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }
	for _, r := range rep.Results {
		a := jsonApproach{Name: r.Name, What: r.What, OpsPerS: round(r.OpsPerSec(), 1),
			P50Ms: ms(r.P50), P99Ms: ms(r.P99), MaxMs: ms(r.Max),
			Errors: r.Errors, Oversold: r.Oversold(), Sold: r.Sold, Stock: r.Stock, Remaining: r.Remaining,
			Acked: r.Acked, Retries: r.Retries, ElapsedS: round(r.Elapsed.Seconds(), 3), SoldOut: r.SoldOut,
			Consistent: r.Consistent(), FirstError: r.FirstError}
		for _, ops := range r.RoundOps {
			a.RoundsOpsPerS = append(a.RoundsOpsPerS, round(ops, 1))
		}
		if rep.BestDB() > 0 {
			ratio := round(rep.Ratio(r), 2)
			a.RatioToBestDB = &ratio
		}
		doc.Approaches = append(doc.Approaches, a)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
