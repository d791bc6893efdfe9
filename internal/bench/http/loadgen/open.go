// Package loadgen sends HTTP load for the benchmarks: an open loop (Attack,
// requests at a constant rate whatever the server does, each latency from
// its scheduled send time) and a closed loop (Closed, N connections each
// sending its next request when the previous reply has arrived). Both send a
// fixed body with pre-signed bearer tokens, so the generator spends its CPU
// on sending, not on signing, and both send through rawClient (raw.go), a
// keep-alive HTTP/1.1 client that costs about a third of net/http's CPU per
// request: the generator shares the machine with what it measures.
//
// For the same reason both send from a fixed pool of goroutines, one per
// connection, each owning its connection: no goroutine, channel operation
// or deadline syscall per request (a connection's deadline moves only when
// it would fall before the request's timeout). The open loop's senders
// take the next request from a shared counter and sleep until its due
// time; when every connection is busy, the requests falling due wait for
// the first sender free, in order, their latencies counting the wait.
//
// internal/bench/http/openloop is the open loop as a command; `seckill bench --cost`
// uses both.
package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Attack is one open-loop run: Rate × Duration requests, request i
// scheduled at start + i/Rate.
type Attack struct {
	Method string
	URL    string
	Body   []byte
	Header http.Header // sent with every request
	// Tokens, when not empty, are sent as "Authorization: Bearer <token>",
	// request i carrying Tokens[i % len(Tokens)].
	Tokens []string
	// Extra, when not empty, is as long as Tokens: request i sends
	// Extra[i % len(Extra)] as one more header line ("Name: value").
	Extra    []string
	Rate     float64 // requests per second
	Duration time.Duration
	// Timeout is one request's, from its actual send: it fails between
	// Timeout and Timeout + min(Timeout/10, 1s) after it.
	Timeout time.Duration
	// Conns is the keep-alive connections, each with its own sender (at
	// most MaxInFlight of them).
	Conns       int
	MaxInFlight int // outstanding requests at most (see Report.MaxInFlight)
	// Timeline, if set, receives after the run one CSV line per request
	// sent (WriteTimeline's format), so that slow replies can be matched
	// with what else happened at their time.
	Timeline io.Writer
}

// Requests returns how many requests the attack schedules: Rate × Duration,
// rounded down.
func (a Attack) Requests() int {
	// The epsilon keeps 0.1 s × 300/s at 30 despite binary fractions.
	return int(math.Floor(a.Rate*a.Duration.Seconds() + 1e-9))
}

// due returns request i's scheduled send, from the attack's start.
func (a Attack) due(i int) time.Duration {
	return time.Duration(float64(i) * float64(time.Second) / a.Rate)
}

// result is what became of one request. Its times are from the attack's
// start (monotonic).
type result struct {
	sent bool
	// free is when the sender that took the request had become free for it
	// (after its previous request, or at the start): later than the
	// request's due time when every connection was busy then.
	free   time.Duration
	send   time.Duration // just before its write
	done   time.Duration // the end of its reply's body, or its error
	status int           // 0 when err != nil
	err    error         // the transport's, nil when a reply came
	// lag is how far its send was behind its due time, its wait for a
	// connection aside (set by report)
	lag time.Duration
}

// maxNap bounds one sleep of a sender waiting for its next request's due
// time, so that it sees a cancelled ctx soon even at a low rate.
const maxNap = 50 * time.Millisecond

// Run sends the attack's requests and waits for their replies. Cancelling
// ctx stops the sending; the requests already sent still run to their end
// (or Timeout), those due but still waiting for a connection are not sent.
//
// The senders are a fixed pool, one goroutine per connection (Conns, or
// MaxInFlight if fewer), each owning its connection: a free sender takes
// the next request (a shared counter), sleeps until its due time and sends
// it. When every connection is busy, the requests that fall due wait until
// a sender is free, in order, and their latencies count that wait.
func (a Attack) Run(ctx context.Context) Report {
	// In-flight requests outlive a cancelled ctx: their replies are measured.
	client, err := newRawClient(a.Method, a.URL, a.Header, a.Body, a.Timeout)
	if err == nil && len(a.Extra) > 0 && len(a.Extra) != len(a.Tokens) {
		err = fmt.Errorf("loadgen: %d extra headers for %d tokens", len(a.Extra), len(a.Tokens))
	}
	n := a.Requests()
	if err != nil {
		return a.report([]result{{sent: true, err: err}})
	}
	results := make([]result, n)
	var stopped atomic.Bool
	if ctx.Err() != nil {
		stopped.Store(true)
	}
	defer context.AfterFunc(ctx, func() { stopped.Store(true) })()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range max(1, min(a.Conns, a.MaxInFlight, n)) {
		wg.Go(func() { a.sender(client.conn(), start, &next, &stopped, results) })
	}
	wg.Wait()
	r := a.report(results)
	if a.Timeline != nil {
		writeTimeline(a.Timeline, a, start, results)
	}
	return r
}

// sender sends requests over conn until none is left or stopped is set.
func (a Attack) sender(conn *rawConn, start time.Time, next *atomic.Int64, stopped *atomic.Bool, results []result) {
	defer conn.close()
	now := time.Now()
	for {
		i := int(next.Add(1) - 1)
		if i >= len(results) || stopped.Load() {
			return
		}
		due := a.due(i)
		free := now.Sub(start)
		for at := free; at < due; at = now.Sub(start) {
			time.Sleep(min(due-at, maxNap))
			if stopped.Load() {
				return
			}
			now = time.Now()
		}
		token, extra := "", ""
		if len(a.Tokens) > 0 {
			token = a.Tokens[i%len(a.Tokens)]
		}
		if len(a.Extra) > 0 {
			extra = a.Extra[i%len(a.Extra)]
		}
		r := &results[i]
		r.sent, r.free, r.send = true, free, now.Sub(start)
		r.status, r.err = conn.do(token, extra, now)
		if r.err != nil {
			r.status = 0
		}
		// The latency ends with the reply's body; this sender is free
		// again from then.
		now = time.Now()
		r.done = now.Sub(start)
	}
}

// TimelineHeader is the first line of a timeline: per request sent, its
// scheduled send as Unix time in milliseconds (to match other processes'
// logs), how far its actual send was behind that, its latency from the
// scheduled send to the end of its reply (both milliseconds), and its
// status (0: no reply).
const TimelineHeader = "due_unix_ms,lag_ms,latency_ms,status"

func writeTimeline(w io.Writer, a Attack, start time.Time, results []result) {
	bw := bufio.NewWriterSize(w, 1<<16)
	fmt.Fprintln(bw, TimelineHeader)
	for i, res := range results {
		if !res.sent {
			continue
		}
		due := a.due(i)
		fmt.Fprintf(bw, "%.3f,%.3f,%.3f,%d\n", float64(start.Add(due).UnixMicro())/1e3, ms(res.lag), ms(res.done-due), res.status)
	}
	_ = bw.Flush()
}

// Report is an attack's outcome. Its durations are milliseconds.
type Report struct {
	Method    string  `json:"method"`
	URL       string  `json:"url"`
	Rate      float64 `json:"rate"` // asked, requests per second
	DurationS float64 `json:"duration_s"`
	Tokens    int     `json:"tokens"`
	Scheduled int     `json:"scheduled"` // Rate × Duration
	Sent      int     `json:"sent"`      // fewer than Scheduled only when interrupted
	Completed int     `json:"completed"` // replies, whatever their status
	Status2xx int     `json:"status_2xx"`
	Non2xx    int     `json:"non_2xx"`
	// Non2xxByStatus counts the replies that were not 2xx by status code.
	Non2xxByStatus map[int]int `json:"non_2xx_by_status"`
	// Errors counts the requests that got no reply (refused, reset,
	// timed out), ErrorsByKind the same by kind, ten kinds at most.
	Errors       int            `json:"errors"`
	ErrorsByKind map[string]int `json:"errors_by_kind,omitempty"`
	// SendRate is the achieved rate: requests per second from the first
	// send to the last. ReplyRate is replies per second from the
	// scheduled start to the last reply.
	SendRate  float64 `json:"send_rate"`
	ReplyRate float64 `json:"reply_rate"`
	// LatencyMS is over the replies (any status), each from its request's
	// scheduled send time to the end of its body.
	LatencyMS Percentiles `json:"latency_ms"`
	// SendLagMS is how far each send was behind its schedule: large when
	// the generator (CPU, in-flight cap) rather than the server held the
	// requests back.
	SendLagMS Percentiles `json:"send_lag_ms"`
	// ConnWaited counts the sends that, once in flight, waited for a free
	// connection (every sender busy), ConnWaitMS those waits over every
	// send (0 for the others). The waits count in the latencies, not in
	// the send lag: they are the server's when its replies hold the
	// connections, but also the generator's when it is too short of CPU
	// (or of connections) to keep up: the send lag cannot tell them apart.
	ConnWaited int         `json:"conn_waited"`
	ConnWaitMS Percentiles `json:"conn_wait_ms"`
	// MaxInFlight is the most requests outstanding at once, of at most
	// InFlightCap; CapReached counts the sends that waited for the cap. A
	// request is outstanding from when it enters flight until it ends
	// (reply or error), whether on a connection or waiting for one; it
	// enters flight at its due time, or, when InFlightCap requests are
	// outstanding then, once enough of them have ended (it waited for the
	// cap; the wait counts in its send lag). Both are worked out after the
	// run from each request's due time and end. The cap also bounds the
	// senders (one per connection, Conns at most): with InFlightCap below
	// Conns, only InFlightCap requests are on the wire at once.
	MaxInFlight int `json:"max_in_flight"`
	InFlightCap int `json:"in_flight_cap"`
	CapReached  int `json:"cap_reached"`
}

// Percentiles of a set of durations, in milliseconds.
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99.9"`
	Max  float64 `json:"max"`
}

// OK reports whether every scheduled request was sent and got a 2xx reply.
func (r Report) OK() bool {
	return r.Sent == r.Scheduled && r.Errors == 0 && r.Non2xx == 0
}

// maxErrorKinds bounds Report.ErrorsByKind; further kinds count as "other".
const maxErrorKinds = 10

// report sums the results up, and sets each sent result's lag.
func (a Attack) report(results []result) Report {
	r := Report{
		Method:         a.Method,
		URL:            a.URL,
		Rate:           a.Rate,
		DurationS:      a.Duration.Seconds(),
		Tokens:         len(a.Tokens),
		Scheduled:      len(results),
		Non2xxByStatus: map[int]int{},
		InFlightCap:    a.MaxInFlight,
	}
	// ends is every sent request's end, in order of time: the k-th sent
	// request enters flight at its due time or, if MaxInFlight requests
	// were outstanding then, at the end of the (k-MaxInFlight)-th to end.
	var ends []time.Duration
	for _, res := range results {
		if res.sent {
			ends = append(ends, res.done)
		}
	}
	slices.Sort(ends)
	capacity := max(a.MaxInFlight, 1)
	latencies := make([]time.Duration, 0, len(results))
	sentLags := make([]time.Duration, 0, len(results))
	connWaits := make([]time.Duration, 0, len(results))
	var firstSend, lastSend, lastReply time.Duration
	ended := 0 // of ends, those at or before the current request's entry
	for i, res := range results {
		if !res.sent {
			continue
		}
		k := r.Sent
		r.Sent++
		due := a.due(i)
		enter := due
		if k >= capacity && ends[k-capacity] > due {
			enter = ends[k-capacity]
			r.CapReached++
		}
		for ended < len(ends) && ends[ended] <= enter {
			ended++
		}
		r.MaxInFlight = max(r.MaxInFlight, k+1-ended)
		// The lag is the send's delay from its due time, less its wait
		// for a connection once in flight (the server's, as latency).
		wait := max(res.free-enter, 0)
		if wait > 0 {
			r.ConnWaited++
		}
		connWaits = append(connWaits, wait)
		lag := max(res.send-due-wait, 0)
		results[i].lag = lag
		sentLags = append(sentLags, lag)
		if k == 0 || res.send < firstSend {
			firstSend = res.send
		}
		lastSend = max(lastSend, res.send)
		if res.err != nil {
			r.Errors++
			if r.ErrorsByKind == nil {
				r.ErrorsByKind = map[string]int{}
			}
			kind := errorKind(res.err)
			if _, seen := r.ErrorsByKind[kind]; !seen && len(r.ErrorsByKind) >= maxErrorKinds {
				kind = "other"
			}
			r.ErrorsByKind[kind]++
			continue
		}
		r.Completed++
		latencies = append(latencies, res.done-due)
		lastReply = max(lastReply, res.done)
		if res.status >= 200 && res.status < 300 {
			r.Status2xx++
		} else {
			r.Non2xx++
			r.Non2xxByStatus[res.status]++
		}
	}
	if r.Sent > 1 && lastSend > firstSend {
		r.SendRate = float64(r.Sent-1) / (lastSend - firstSend).Seconds()
	}
	if r.Completed > 0 && lastReply > 0 {
		r.ReplyRate = float64(r.Completed) / lastReply.Seconds()
	}
	r.LatencyMS = PercentilesOf(latencies)
	r.SendLagMS = PercentilesOf(sentLags)
	r.ConnWaitMS = PercentilesOf(connWaits)
	return r
}

// errorKind names a transport error without its addresses, so that errors
// of one kind on different connections count together.
func errorKind(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed before the reply (EOF)"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// PercentilesOf sorts ds and returns its nearest-rank percentiles.
func PercentilesOf(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(ds)))) - 1
		return ms(ds[min(max(i, 0), len(ds)-1)])
	}
	return Percentiles{P50: at(0.50), P90: at(0.90), P99: at(0.99), P999: at(0.999), Max: ms(ds[len(ds)-1])}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// WriteText writes the report for a reader.
func (r Report) WriteText(w io.Writer) {
	tokens := "no Authorization header"
	if r.Tokens > 0 {
		tokens = fmt.Sprintf("%d tokens round robin", r.Tokens)
	}
	fmt.Fprintf(w, "openloop: %s %s at %g/s for %gs, %s\n", r.Method, r.URL, r.Rate, r.DurationS, tokens)
	fmt.Fprintf(w, "requests  scheduled %d  sent %d  completed %d  2xx %d  non-2xx %d  errors %d\n",
		r.Scheduled, r.Sent, r.Completed, r.Status2xx, r.Non2xx, r.Errors)
	if r.Non2xx > 0 {
		var parts []string
		for _, status := range slices.Sorted(maps.Keys(r.Non2xxByStatus)) {
			parts = append(parts, fmt.Sprintf("%d %s × %d", status, http.StatusText(status), r.Non2xxByStatus[status]))
		}
		fmt.Fprintf(w, "non-2xx   %s\n", strings.Join(parts, ", "))
	}
	for _, kind := range slices.Sorted(maps.Keys(r.ErrorsByKind)) {
		fmt.Fprintf(w, "error     %s × %d\n", kind, r.ErrorsByKind[kind])
	}
	fmt.Fprintf(w, "rate      sent %.1f/s  replies %.1f/s\n", r.SendRate, r.ReplyRate)
	l := r.LatencyMS
	fmt.Fprintf(w, "latency   p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (scheduled send to end of reply)\n",
		short(l.P50), short(l.P90), short(l.P99), short(l.P999), short(l.Max))
	g := r.SendLagMS
	fmt.Fprintf(w, "send lag  p50 %s  p99 %s  max %s  behind schedule; in flight at most %d of %d\n",
		short(g.P50), short(g.P99), short(g.Max), r.MaxInFlight, r.InFlightCap)
	switch {
	case r.CapReached > 0:
		fmt.Fprintf(w, "note      %d sends waited for the in-flight cap (--max-in-flight) and fell up to %s behind schedule: the server did not keep up; the latencies include the wait\n",
			r.CapReached, short(g.Max))
	case g.Max > 10:
		fmt.Fprintf(w, "note      the sender, short of CPU, fell up to %s behind schedule: the latencies include that wait, so part of them is the generator's, not the server's\n",
			short(g.Max))
	}
	if c := r.ConnWaitMS; r.ConnWaited > 0 {
		fmt.Fprintf(w, "note      %d sends waited for a free connection (all busy), p99 %s, max %s, sent %.1f/s of %g/s asked: the latencies include the wait, the send lag does not; it is the server's if its replies held the connections, the generator's if it was short of CPU or of --conns\n",
			r.ConnWaited, short(c.P99), short(c.Max), r.SendRate, r.Rate)
	}
	if r.Sent < r.Scheduled {
		fmt.Fprintf(w, "note      interrupted: %d of %d scheduled requests were not sent\n", r.Scheduled-r.Sent, r.Scheduled)
	}
}

// short formats milliseconds as a duration with about three significant
// digits.
func short(msec float64) string {
	d := time.Duration(msec * float64(time.Millisecond))
	for _, unit := range []time.Duration{time.Microsecond, time.Millisecond, time.Second} {
		switch {
		case d < unit:
			return d.Round(unit / 1000).String()
		case d < 10*unit:
			return d.Round(unit / 100).String()
		case d < 100*unit:
			return d.Round(unit / 10).String()
		}
	}
	return d.Round(time.Second).String()
}
