package keyspace_test

import (
	"context"
	"testing"

	"github.com/seckill/seckill/internal/keyspace"
	"github.com/seckill/seckill/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, "keyspace") }

// TestDelete: Delete removes every key of its prefix, and only those, on
// a single server and on every master of a cluster.
func TestDelete(t *testing.T) {
	redistest.ForEachBackend(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		c := b.Client(t)
		mine, other := redistest.Prefix(t, c), redistest.Prefix(t, c)
		keys := []string{"{" + mine + ":s1}:sale", "{" + mine + ":s2}:events", "{" + mine + ":rl:u}", "x{" + mine + ":s3}"}
		for _, k := range append(keys, "{"+other+":s1}:sale", mine+":untagged") {
			if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { c.Del(context.Background(), mine+":untagged") })
		n, err := keyspace.Delete(ctx, c, mine)
		if err != nil || n != int64(len(keys)) {
			t.Fatalf("Delete = %d, %v; want %d, nil", n, err, len(keys))
		}
		for _, k := range keys {
			if c.Exists(ctx, k).Val() != 0 {
				t.Errorf("%s is still there", k)
			}
		}
		for _, k := range []string{"{" + other + ":s1}:sale", mine + ":untagged"} {
			if c.Exists(ctx, k).Val() != 1 {
				t.Errorf("%s was deleted: it does not carry the prefix's tag", k)
			}
		}
	})
}
