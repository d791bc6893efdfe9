package cost

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisStats is what a cost measurement reads of Redis's INFO: its CPU,
// the bytes its clients sent and were sent, and every command's calls and
// usec, each a counter since the server started (or its last CONFIG
// RESETSTAT, which this tool never sends: the Redis may be shared).
type redisStats struct {
	CPUMicros     float64 // used_cpu_sys + used_cpu_user
	EvalshaCalls  int64
	EvalshaMicros int64
	NetIn, NetOut int64                // total_net_input_bytes, total_net_output_bytes
	Commands      map[string]cmdCounts // by INFO's name without "cmdstat_" (evalsha, xack, client|setinfo...)
}

// cmdCounts is one command's line of INFO commandstats.
type cmdCounts struct {
	Calls, Micros int64
}

// readRedisStats reads INFO cpu, stats and commandstats.
func readRedisStats(ctx context.Context, c *redis.Client) (redisStats, error) {
	text, err := c.Info(ctx, "cpu", "stats", "commandstats").Result()
	if err != nil {
		return redisStats{}, fmt.Errorf("redis INFO: %w", err)
	}
	return parseRedisInfo(text)
}

// parseRedisInfo parses INFO's "key:value" lines. EVALSHA counts zero when
// the server has run none since its start.
func parseRedisInfo(text string) (redisStats, error) {
	var s redisStats
	var sys, user bool
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_sys", "used_cpu_user":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 {
				return redisStats{}, fmt.Errorf("redis INFO: bad %s %q", k, v)
			}
			s.CPUMicros += f * 1e6
			sys, user = sys || k == "used_cpu_sys", user || k == "used_cpu_user"
		case "total_net_input_bytes", "total_net_output_bytes":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return redisStats{}, fmt.Errorf("redis INFO: bad %s %q", k, v)
			}
			if k == "total_net_input_bytes" {
				s.NetIn = n
			} else {
				s.NetOut = n
			}
		default:
			name, ok := strings.CutPrefix(k, "cmdstat_")
			if !ok {
				continue
			}
			// calls=6579,usec=2822391,usec_per_call=429.00,...
			var cc cmdCounts
			for _, kv := range strings.Split(v, ",") {
				field, num, _ := strings.Cut(kv, "=")
				var err error
				switch field {
				case "calls":
					cc.Calls, err = strconv.ParseInt(num, 10, 64)
				case "usec":
					cc.Micros, err = strconv.ParseInt(num, 10, 64)
				}
				if err != nil {
					return redisStats{}, fmt.Errorf("redis INFO: bad %s %q", k, v)
				}
			}
			if s.Commands == nil {
				s.Commands = make(map[string]cmdCounts)
			}
			s.Commands[name] = cc
		}
	}
	s.EvalshaCalls, s.EvalshaMicros = s.Commands["evalsha"].Calls, s.Commands["evalsha"].Micros
	if !sys || !user {
		return redisStats{}, fmt.Errorf("redis INFO: no used_cpu_sys and used_cpu_user")
	}
	return s, nil
}

// sub returns the counters' growth from before to s; a command that did
// not run in between is left out.
func (s redisStats) sub(before redisStats) redisStats {
	d := redisStats{CPUMicros: s.CPUMicros - before.CPUMicros,
		EvalshaCalls: s.EvalshaCalls - before.EvalshaCalls, EvalshaMicros: s.EvalshaMicros - before.EvalshaMicros,
		NetIn: s.NetIn - before.NetIn, NetOut: s.NetOut - before.NetOut}
	for name, c := range s.Commands {
		b := before.Commands[name]
		if c.Calls > b.Calls {
			if d.Commands == nil {
				d.Commands = make(map[string]cmdCounts)
			}
			d.Commands[name] = cmdCounts{Calls: c.Calls - b.Calls, Micros: c.Micros - b.Micros}
		}
	}
	return d
}

// unlinkPrefixed removes every key of a service run with key prefix p:
// "{p:...}..." (a sale's, a rate limit's) and "p:..." (channels, streams).
func unlinkPrefixed(ctx context.Context, c *redis.Client, p string) error {
	for _, pattern := range []string{"{" + p + ":*", p + ":*"} {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 500 {
				if err := c.Unlink(ctx, batch...).Err(); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(batch) > 0 {
			if err := c.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}
