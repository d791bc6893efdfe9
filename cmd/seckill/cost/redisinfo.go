package cost

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisStats is what a cost measurement reads of Redis's INFO: its CPU and
// its EVALSHA calls, each a counter since the server started (or its last
// CONFIG RESETSTAT, which this tool never sends: the Redis may be shared).
type redisStats struct {
	CPUMicros     float64 // used_cpu_sys + used_cpu_user
	EvalshaCalls  int64
	EvalshaMicros int64
}

// readRedisStats reads INFO cpu and INFO commandstats.
func readRedisStats(ctx context.Context, c *redis.Client) (redisStats, error) {
	text, err := c.Info(ctx, "cpu", "commandstats").Result()
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
		case "cmdstat_evalsha":
			// calls=6579,usec=2822391,usec_per_call=429.00,...
			for _, kv := range strings.Split(v, ",") {
				name, num, _ := strings.Cut(kv, "=")
				var err error
				switch name {
				case "calls":
					s.EvalshaCalls, err = strconv.ParseInt(num, 10, 64)
				case "usec":
					s.EvalshaMicros, err = strconv.ParseInt(num, 10, 64)
				}
				if err != nil {
					return redisStats{}, fmt.Errorf("redis INFO: bad cmdstat_evalsha %q", v)
				}
			}
		}
	}
	if !sys || !user {
		return redisStats{}, fmt.Errorf("redis INFO: no used_cpu_sys and used_cpu_user")
	}
	return s, nil
}

// sub returns the counters' growth from before to s.
func (s redisStats) sub(before redisStats) redisStats {
	return redisStats{CPUMicros: s.CPUMicros - before.CPUMicros,
		EvalshaCalls: s.EvalshaCalls - before.EvalshaCalls, EvalshaMicros: s.EvalshaMicros - before.EvalshaMicros}
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
