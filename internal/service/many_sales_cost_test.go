package service_test

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// phaseCost is what a phase of TestManyLiveSales cost: the Redis server's
// CPU, commands and reads (one read event is about one round trip), this
// test process's CPU (the service and its HTTP clients), the CPU of the
// PostgreSQL backends serving this process, and the orders the database
// holds (the ones the order consumer stored in the phase: a phase it did
// not reach, as the first sale's, whose consumer finds it only at its
// next discovery, a second on, shows next to no PostgreSQL time). Logged,
// never asserted.
type phaseCost struct {
	redisCPU, procCPU, pgCPU float64 // seconds
	reads, commands          int64
	evalsha                  int64
	cmds                     map[string][2]int64 // command: calls, µs
	pg                       map[int64]float64   // backend pid: CPU seconds
	orders                   int64               // rows in the orders table
}

// costMeter reads a phaseCost; db reaches the PostgreSQL server the
// service uses (any database: only pg_stat_activity is read).
type costMeter struct {
	rdb *redis.Client
	db  *sql.DB
}

func (m costMeter) read(t *testing.T) phaseCost {
	t.Helper()
	ctx := context.Background()
	c := phaseCost{cmds: map[string][2]int64{}, pg: map[int64]float64{}}
	if info, err := m.rdb.Info(ctx, "cpu", "stats", "commandstats").Result(); err == nil {
		for _, line := range strings.Split(info, "\r\n") {
			k, v, _ := strings.Cut(line, ":")
			switch k {
			case "used_cpu_sys", "used_cpu_user":
				f, _ := strconv.ParseFloat(v, 64)
				c.redisCPU += f
			case "total_reads_processed":
				c.reads, _ = strconv.ParseInt(v, 10, 64)
			case "total_commands_processed":
				c.commands, _ = strconv.ParseInt(v, 10, 64)
			}
			if name, ok := strings.CutPrefix(k, "cmdstat_"); ok {
				var calls, usec int64
				for _, f := range strings.Split(v, ",") {
					fk, fv, _ := strings.Cut(f, "=")
					switch fk {
					case "calls":
						calls, _ = strconv.ParseInt(fv, 10, 64)
					case "usec":
						usec, _ = strconv.ParseInt(fv, 10, 64)
					}
				}
				c.cmds[name] = [2]int64{calls, usec}
				if name == "evalsha" || name == "eval" {
					c.evalsha += calls
				}
			}
		}
	}
	c.procCPU = procCPU("self")
	// PostgreSQL: the backends whose client port is one of this process's
	// connections to the server.
	ports := ownTCPPorts()
	if m.db != nil {
		rows, err := m.db.QueryContext(ctx, `SELECT pid, client_port FROM pg_stat_activity WHERE client_port IS NOT NULL`)
		if err == nil {
			for rows.Next() {
				var pid, port int64
				if rows.Scan(&pid, &port) == nil && ports[port] {
					c.pg[pid] = procCPU(strconv.FormatInt(pid, 10))
				}
			}
			_ = rows.Close()
		}
		_ = m.db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&c.orders)
	}
	return c
}

// sub is c - before. A PostgreSQL backend counts what it spent since
// before (all it spent, if it started since); one that ended meanwhile is
// not counted (the pool keeps its connections through a phase).
func (c phaseCost) sub(before phaseCost) phaseCost {
	d := phaseCost{redisCPU: c.redisCPU - before.redisCPU, procCPU: c.procCPU - before.procCPU,
		reads: c.reads - before.reads, commands: c.commands - before.commands,
		evalsha: c.evalsha - before.evalsha, cmds: map[string][2]int64{}, orders: c.orders - before.orders}
	for pid, cpu := range c.pg {
		d.pgCPU += cpu - before.pg[pid]
	}
	for k, v := range c.cmds {
		if dv := [2]int64{v[0] - before.cmds[k][0], v[1] - before.cmds[k][1]}; dv[0] > 0 {
			d.cmds[k] = dv
		}
	}
	return d
}

// top lists the commands that took most of Redis's time, per buy.
func (c phaseCost) top(buys int) string { return "Redis commands per buy: " + c.topPer(float64(buys)) }

// idle is what a phase without buys cost per second.
func (c phaseCost) idle(d time.Duration) string {
	s := d.Seconds()
	return fmt.Sprintf("per second: Redis %.1f ms CPU, %.0f commands, %.1f script calls; test process %.1f ms CPU; "+
		"PostgreSQL backends %.1f ms CPU; Redis commands per second: %s",
		c.redisCPU/s*1e3, float64(c.commands)/s, float64(c.evalsha)/s, c.procCPU/s*1e3, c.pgCPU/s*1e3, c.topPer(s))
}

// topPer lists the commands that took most of Redis's time, their calls
// and µs over n.
func (c phaseCost) topPer(n float64) string {
	names := make([]string, 0, len(c.cmds))
	for k := range c.cmds {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(c.cmds[b][1], c.cmds[a][1]) })
	var out []string
	for _, k := range names[:min(len(names), 16)] {
		out = append(out, fmt.Sprintf("%s %.2f calls %.1f µs", k, float64(c.cmds[k][0])/n, float64(c.cmds[k][1])/n))
	}
	return strings.Join(out, "; ")
}

func (c phaseCost) per(buys int) string {
	b := float64(buys)
	return fmt.Sprintf("per buy: Redis %.1f µs CPU, %.2f reads (round trips), %.2f commands, %.3f script calls; "+
		"test process %.0f µs CPU; PostgreSQL backends %.0f µs CPU (%d orders stored meanwhile)",
		c.redisCPU/b*1e6, float64(c.reads)/b, float64(c.commands)/b, float64(c.evalsha)/b, c.procCPU/b*1e6, c.pgCPU/b*1e6, c.orders)
}

// procCPU is the user+system CPU time of process pid ("self" for this one)
// in seconds, 0 if it cannot be read.
func procCPU(pid string) float64 {
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from the 3rd on
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100 // USER_HZ
}

// ownTCPPorts returns the local ports of this process's TCP connections to
// port 5432 (PostgreSQL).
func ownTCPPorts() map[int64]bool {
	inodes := map[string]bool{}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, fd := range fds {
			if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	ports := map[int64]bool{}
	for _, name := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || !inodes[fs[9]] {
				continue
			}
			_, remote, _ := strings.Cut(fs[2], ":")
			if remote != "1538" { // 5432
				continue
			}
			_, local, _ := strings.Cut(fs[1], ":")
			if p, err := strconv.ParseInt(local, 16, 64); err == nil {
				ports[p] = true
			}
		}
		_ = f.Close()
	}
	return ports
}

// profilePhase writes a CPU profile of the process until the returned
// function is called, to the file $env names, if it is set.
func profilePhase(t *testing.T, env string) func() {
	name := os.Getenv(env)
	if name == "" {
		return func() {}
	}
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}
