package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Closed is a closed-loop run: Conns workers, each over its own keep-alive
// connection, send a request, read its whole reply, and send the next, until
// Duration has passed or the tokens run out. Request i carries Tokens[i]
// (each token used once: a fresh buyer per request); with no tokens, no
// Authorization header and no limit but Duration. Request i also carries
// Extra[i], when Extra is not empty, as one more header line
// ("X-Purchase-Token: ..."): a header of that buyer's own.
//
// Its latencies run from each request's actual send to the end of its
// reply: a closed loop stops sending while the server stalls, so they hide
// the wait a crowd would see (use Attack for that).
type Closed struct {
	Method   string
	URL      string
	Body     []byte
	Header   http.Header // sent with every request
	Tokens   []string
	Extra    []string // as long as Tokens, or empty
	Conns    int
	Duration time.Duration
	Timeout  time.Duration // of one request
}

// ClosedReport is a closed-loop run's outcome. Its durations are
// milliseconds.
type ClosedReport struct {
	Conns     int     `json:"conns"`
	DurationS float64 `json:"duration_s"` // from the first send to the last reply
	Sent      int     `json:"sent"`
	Status2xx int     `json:"status_2xx"`
	Non2xx    int     `json:"non_2xx"`
	// Non2xxByStatus counts the replies that were not 2xx by status code.
	Non2xxByStatus map[int]int `json:"non_2xx_by_status,omitempty"`
	// Errors counts the requests that got no reply, ErrorsByKind the same
	// by kind.
	Errors       int            `json:"errors"`
	ErrorsByKind map[string]int `json:"errors_by_kind,omitempty"`
	// OutOfTokens is true when the run stopped because every token was
	// used, before Duration.
	OutOfTokens bool `json:"out_of_tokens"`
	// Rate2xx is 2xx replies per second over DurationS.
	Rate2xx   float64     `json:"rate_2xx"`
	LatencyMS Percentiles `json:"latency_ms"` // over the replies, any status
}

// Run sends until Duration has passed, the tokens run out or ctx is
// cancelled; requests already sent run to their end (or Timeout).
func (c Closed) Run(ctx context.Context) ClosedReport {
	client, err := newRawClient(c.Method, c.URL, c.Header, c.Body, c.Timeout)
	if err == nil && len(c.Extra) > 0 && len(c.Extra) != len(c.Tokens) {
		err = fmt.Errorf("loadgen: %d extra headers for %d tokens", len(c.Extra), len(c.Tokens))
	}
	if err != nil {
		return ClosedReport{Conns: c.Conns, Errors: 1, ErrorsByKind: map[string]int{err.Error(): 1}}
	}

	type worker struct {
		latencies []time.Duration
		statuses  map[int]int
		errors    map[string]int
		last      time.Time
	}
	workers := make([]worker, c.Conns)
	var next atomic.Int64
	var outOfTokens atomic.Bool
	start := time.Now()
	deadline := start.Add(c.Duration)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := &workers[w]
			me.statuses, me.errors = map[int]int{}, map[string]int{}
			conn := client.conn()
			defer conn.close()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				i := int(next.Add(1) - 1)
				if len(c.Tokens) > 0 && i >= len(c.Tokens) {
					outOfTokens.Store(true)
					return
				}
				sent := time.Now()
				token, extra := "", ""
				if len(c.Tokens) > 0 {
					token = c.Tokens[i]
				}
				if len(c.Extra) > 0 {
					extra = c.Extra[i]
				}
				status, err := conn.do(token, extra, sent)
				me.last = time.Now()
				if err != nil {
					me.errors[errorKind(err)]++
					continue
				}
				me.statuses[status]++
				me.latencies = append(me.latencies, me.last.Sub(sent))
			}
		}()
	}
	wg.Wait()

	r := ClosedReport{Conns: c.Conns, OutOfTokens: outOfTokens.Load()}
	var latencies []time.Duration
	var last time.Time
	for _, w := range workers {
		latencies = append(latencies, w.latencies...)
		if w.last.After(last) {
			last = w.last
		}
		for status, n := range w.statuses {
			r.Sent += n
			if status >= 200 && status < 300 {
				r.Status2xx += n
				continue
			}
			r.Non2xx += n
			if r.Non2xxByStatus == nil {
				r.Non2xxByStatus = map[int]int{}
			}
			r.Non2xxByStatus[status] += n
		}
		for kind, n := range w.errors {
			r.Sent += n
			r.Errors += n
			if r.ErrorsByKind == nil {
				r.ErrorsByKind = map[string]int{}
			}
			r.ErrorsByKind[kind] += n
		}
	}
	if last.After(start) {
		r.DurationS = last.Sub(start).Seconds()
		r.Rate2xx = float64(r.Status2xx) / r.DurationS
	}
	r.LatencyMS = PercentilesOf(latencies)
	return r
}
