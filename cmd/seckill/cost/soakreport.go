package cost

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// PrintSoakJSON writes the soak's report as one indented JSON document.
func PrintSoakJSON(w io.Writer, rep SoakReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		SoakReport
		Passed bool `json:"passed"`
	}{rep, rep.Passed()})
}

// PrintSoakText writes the soak's report: a row per window, then what came
// after the load and the flat-over-time ratios.
func PrintSoakText(w io.Writer, rep SoakReport) {
	fmt.Fprintf(w, "build: %s serve\nredis: %s\n", rep.Bin, rep.Redis)
	fmt.Fprintf(w, "load: open loop at %.0f buys/s (%.2f of the closed loop's %.0f), %d connections at most, cycling through %d buyers, one sale; windows of %gs\n\n",
		rep.RateAsked, rep.Fraction, rep.ClosedRate, rep.Conns, rep.Buyers, rep.WindowS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "window\tend s\tbuys/s\tnon-2xx\terrors\tp50 ms\tp99 ms\tmax ms\tservice µs\tRedis µs\tPG µs\tservice RSS MB\tRedis MB\tlive orders\tB/order\tbuyers\t")
	for _, x := range rep.Windows {
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%d\t%d\t%.1f\t%.1f\t%.0f\t%.1f\t%.1f\t%.1f\t%.0f\t%.0f\t%d\t%.1f\t%d\t\n",
			x.N, x.EndS, x.BuysPerS, x.Non2xx, x.Errors, x.P50MS, x.P99MS, x.MaxMS, x.ServiceUS, x.RedisUS, x.PostgresUS,
			float64(x.ServiceRSS)/1e6, float64(x.RedisBytes)/1e6, x.LiveOrders, x.BytesPerOrder, x.DistinctBuyers)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nµs: CPU per accepted buy in the window (PG: the run database's backends and PostgreSQL's background processes).")
	fmt.Fprintln(w, "Redis MB: used_memory less what Redis used before the sale; B/order: that over every order the sale holds (all live).")
	if rep.Accepted > 0 {
		fmt.Fprintf(w, "\nafter the load: %d buys accepted, %d orders in the database (caught up in %.1fs), reconcile consistent: %v\n",
			rep.Accepted, rep.OrdersInDB, rep.CatchUpS, rep.Consistent)
	}
	if rep.Reconcile != "" {
		fmt.Fprintf(w, "reconcile: %s\n", rep.Reconcile)
	}
	if f := rep.Flat; f != nil {
		fmt.Fprintf(w, "\nflat over time, window %d ÷ window %d (target each within ±%.0f%%):\n", f.Last, f.Early, FlatBand*100)
		for _, x := range []struct {
			name  string
			ratio float64
		}{{"service RSS", f.RSS}, {"Redis bytes per live order", f.BytesPerOrder}, {"buy p99", f.P99}} {
			fmt.Fprintf(w, "  %-27s %.3f  %s\n", x.name, x.ratio, metWord(flat(x.ratio)))
		}
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	verdict := "the soak met its targets"
	if !rep.Passed() {
		verdict = "the soak did NOT meet its targets"
	}
	fmt.Fprintf(w, "\n%s\n", verdict)
}

func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}
