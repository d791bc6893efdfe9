package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Counters are a Redis server's CPU seconds (user and system), its
// commandstats (calls and usec by command name, lower case) and its
// used_memory, as INFO reports them: a benchmark reads them before and
// after its load and reports the differences per operation.
type Counters struct {
	CPU         float64
	Calls, Usec map[string]int64
	Mem         int64
}

// ReadCounters reads rdb's Counters (INFO cpu, commandstats and memory).
func ReadCounters(tb testing.TB, rdb *redis.Client) Counters {
	tb.Helper()
	text, err := rdb.Info(context.Background(), "cpu", "commandstats", "memory").Result()
	if err != nil {
		tb.Fatal(err)
	}
	c := Counters{Calls: map[string]int64{}, Usec: map[string]int64{}}
	for l := range strings.SplitSeq(text, "\r\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_sys" || k == "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			c.CPU += f
		case k == "used_memory":
			c.Mem, _ = strconv.ParseInt(v, 10, 64)
		case strings.HasPrefix(k, "cmdstat_"):
			name := strings.TrimPrefix(k, "cmdstat_")
			for kv := range strings.SplitSeq(v, ",") {
				f, x, _ := strings.Cut(kv, "=")
				n, _ := strconv.ParseInt(x, 10, 64)
				switch f {
				case "calls":
					c.Calls[name] = n
				case "usec":
					c.Usec[name] = n
				}
			}
		}
	}
	return c
}
