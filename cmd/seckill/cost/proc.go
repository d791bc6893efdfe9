package cost

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ticksPerSecond is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// 100 on every Linux architecture's user ABI, whatever the kernel's HZ.
const ticksPerSecond = 100

// procStat is what a cost measurement needs of one /proc/PID/stat line.
type procStat struct {
	Comm  string
	PPID  int
	Ticks int64 // utime + stime, in clock ticks (1/ticksPerSecond s)
}

// parseProcStat parses a /proc/PID/stat line. The command name (field 2)
// is in parentheses and may itself hold spaces and parentheses, so the
// fields after it are counted from the last ')'.
func parseProcStat(line string) (procStat, error) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("proc stat %.40q: no (comm)", line)
	}
	// After "pid (comm) ": state ppid pgrp session tty_nr tpgid flags
	// minflt cminflt majflt cmajflt utime stime ... (fields 3, 4, ... 14, 15).
	rest := strings.Fields(line[end+1:])
	if len(rest) < 13 {
		return procStat{}, fmt.Errorf("proc stat %.40q: %d fields after comm, want 13 or more", line, len(rest))
	}
	ppid, err1 := strconv.Atoi(rest[1])
	utime, err2 := strconv.ParseInt(rest[11], 10, 64)
	stime, err3 := strconv.ParseInt(rest[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || utime < 0 || stime < 0 {
		return procStat{}, fmt.Errorf("proc stat %.40q: bad ppid, utime or stime", line)
	}
	return procStat{Comm: line[open+1 : end], PPID: ppid, Ticks: utime + stime}, nil
}

// readProcStat reads /proc/PID/stat.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(string(b))
}

// ticksToMicros converts clock ticks to microseconds.
func ticksToMicros(ticks int64) float64 {
	return float64(ticks) * 1e6 / ticksPerSecond
}

// perBuy returns µs of CPU per buy, or 0 when there were no buys (a
// column that shows "-").
func perBuy(micros float64, buys int) float64 {
	if buys <= 0 || micros < 0 {
		return 0
	}
	return micros / float64(buys)
}

// pgProc is one PostgreSQL server process seen by a pgSampler.
type pgProc struct {
	first, last int64 // its ticks when first and last seen
	title       string
}

// pgSampler follows the processes of one PostgreSQL server (the postmaster
// and its children) through a measurement. Backends come and go, so it is
// sampled during the run: a process that exits keeps what it was last seen
// to have used, a process that starts counts from zero.
type pgSampler struct {
	postmaster int
	db         string // the round's database: its backends are "ours"
	procs      map[int]*pgProc
}

// pgAux are the titles of PostgreSQL's own background processes, whose work
// (WAL writing, checkpoints) the round's database shares with the others.
var pgAux = []string{"postgres: checkpointer", "postgres: background writer", "postgres: walwriter",
	"postgres: autovacuum launcher", "postgres: logical replication launcher", "postgres: archiver",
	"postgres: stats collector"}

// sample reads every child of the postmaster, and the postmaster.
func (s *pgSampler) sample(first bool) error {
	if s.procs == nil {
		s.procs = map[int]*pgProc{}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || (pid != s.postmaster && st.PPID != s.postmaster) {
			continue
		}
		p := s.procs[pid]
		if p == nil {
			p = &pgProc{}
			if first {
				p.first = st.Ticks
			}
			s.procs[pid] = p
		}
		p.last = max(p.last, st.Ticks)
		if p.title == "" || !first {
			if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); err == nil {
				p.title = string(bytes.TrimRight(bytes.ReplaceAll(b, []byte{0}, []byte{' '}), " "))
			}
		}
	}
	return nil
}

// micros returns the CPU the server used since the first sample: of the
// round's own backends and the background processes (ours), and of every
// process (all, other databases' backends included).
func (s *pgSampler) micros() (ours, all float64) {
	var o, a int64
	for pid, p := range s.procs {
		d := p.last - p.first
		a += d
		if pid != s.postmaster && pgOurs(p.title, s.db) {
			o += d
		}
	}
	return ticksToMicros(o), ticksToMicros(a)
}

// pgOurs reports whether a postgres process title is a backend of db
// ("postgres: user db host(port) state", "postgres: autovacuum worker db")
// or a background process.
func pgOurs(title, db string) bool {
	for _, aux := range pgAux {
		if title == aux || strings.HasPrefix(title, aux+" ") {
			return true
		}
	}
	for _, w := range strings.Fields(title) {
		if w == db {
			return true
		}
	}
	return false
}

// machineTimes is the "cpu" line of /proc/stat: the ticks every CPU of the
// machine spent, in all (busy, idle and stolen) and of them idle (idle +
// iowait) and stolen (steal: a virtual machine's CPU was runnable but the
// hypervisor ran something else). Between two readings they say how much
// of the machine the round left unused and how much it never had.
type machineTimes struct {
	total, idle, steal int64
}

// parseMachineTimes parses /proc/stat's "cpu" line (user nice system idle
// iowait irq softirq steal guest guest_nice; guest time is inside user,
// so it is not added again). Kernels before 2.6.11 end before steal: it
// counts 0.
func parseMachineTimes(stat string) (machineTimes, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return machineTimes{}, fmt.Errorf("/proc/stat %.40q: no cpu line", line)
	}
	var m machineTimes
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return machineTimes{}, fmt.Errorf("/proc/stat %.40q: bad field %d", line, i+2)
		}
		m.total += v
		switch i {
		case 3, 4: // idle, iowait
			m.idle += v
		case 7:
			m.steal = v
		}
	}
	return m, nil
}

// readMachineTimes reads /proc/stat.
func readMachineTimes() (machineTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTimes{}, err
	}
	return parseMachineTimes(string(b))
}

// shares returns the idle and stolen percentages of the machine's time
// from m to after; ok is false, and they 0, 0, when no tick passed or a
// counter went back (a CPU taken offline, a virtual machine migrated):
// then they say nothing, and a 0 % idle must not pass for a saturated
// machine.
func (m machineTimes) shares(after machineTimes) (idlePct, stealPct float64, ok bool) {
	total := after.total - m.total
	idle, steal := after.idle-m.idle, after.steal-m.steal
	if total <= 0 || idle < 0 || steal < 0 || idle+steal > total {
		return 0, 0, false
	}
	return 100 * float64(idle) / float64(total), 100 * float64(steal) / float64(total), true
}
