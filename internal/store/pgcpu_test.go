package store

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat
// (100 on every Linux this runs on).
const clockTicks = 100

// procCPU returns the CPU time (user + system) of process pid, in seconds,
// from /proc/PID/stat; false if it cannot be read.
func procCPU(pid int) (float64, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	// The command name is in parentheses and may hold spaces: count fields
	// after its closing parenthesis (utime and stime are fields 14 and 15).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(ut+st) / clockTicks, true
}

// postgresCPU returns the CPU time of every process named postgres on the
// machine (server, backends, WAL writer, checkpointer...), by pid, in
// seconds. Other clients' backends count too.
func postgresCPU() map[int]float64 {
	ents, _ := os.ReadDir("/proc")
	out := map[int]float64{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		if cpu, ok := procCPU(pid); ok {
			out[pid] = cpu
		}
	}
	return out
}

// cpuSince sums what each process of now spent since then (a process
// started meanwhile: all of it; one that ended meanwhile is lost).
func cpuSince(then, now map[int]float64) float64 {
	var sum float64
	for pid, cpu := range now {
		sum += cpu - then[pid]
	}
	return sum
}

// pgMeter measures what a benchmark's own connections cost PostgreSQL: the
// backends whose application_name is its own (set in the URL it opens),
// and, noisier, every postgres process.
type pgMeter struct {
	app          string
	own, all     float64
	ownAt, allAt map[int]float64 // at start, by pid
}

// meteredURL returns url with an application_name of its own, for a pgMeter.
func meteredURL(tb testing.TB, raw string) (string, *pgMeter) {
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatal(err)
	}
	m := &pgMeter{app: "bench_" + strings.TrimPrefix(u.Query().Get("search_path"), "t_")}
	q := u.Query()
	q.Set("application_name", m.app)
	u.RawQuery = q.Encode()
	return u.String(), m
}

// backends returns the CPU seconds of each of the meter's backends.
func (m *pgMeter) backends(tb testing.TB, s *Store) map[int]float64 {
	rows, err := s.db.QueryContext(context.Background(), "SELECT pid FROM pg_stat_activity WHERE application_name = $1", m.app)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[int]float64{}
	must(tb, scanEach(rows, func() error {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return err
		}
		out[pid], _ = procCPU(pid)
		return nil
	}))
	return out
}

// start reads the counters; stop reads them again and keeps the difference.
func (m *pgMeter) start(tb testing.TB, s *Store) {
	m.ownAt, m.allAt = m.backends(tb, s), postgresCPU()
}

func (m *pgMeter) stop(tb testing.TB, s *Store) {
	m.all = cpuSince(m.allAt, postgresCPU())
	m.own = cpuSince(m.ownAt, m.backends(tb, s))
}

// report adds the CPU per unit as metrics.
func (m *pgMeter) report(b *testing.B, units float64, unit string) {
	b.ReportMetric(m.own/units*1e6, "pg-own-µs/"+unit)
	b.ReportMetric(m.all/units*1e6, "pg-all-µs/"+unit)
}
