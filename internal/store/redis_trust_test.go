package store

import (
	"context"
	"testing"
	"time"
)

func TestRedisTrust(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		got, err := s.TrustedRedis(ctx)
		must(t, err)
		check(t, "trusted nodes of a new database", got, map[string]RedisNode{})

		must(t, s.TrustRedis(ctx, []RedisNode{{Node: "", RunID: "r1", ReplID: "p1"}, {Node: "n2", RunID: "r2", ReplID: "p2"}}, "a", time.Now()))
		must(t, s.TrustRedis(ctx, []RedisNode{{Node: "", RunID: "r1b", ReplID: "p1b"}}, "b", time.Now()))
		got, err = s.TrustedRedis(ctx)
		must(t, err)
		check(t, "trusted nodes", got, map[string]RedisNode{
			"":   {Node: "", RunID: "r1b", ReplID: "p1b"},
			"n2": {Node: "n2", RunID: "r2", ReplID: "p2"},
		})
	})
}
