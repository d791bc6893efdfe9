package store

import (
	"context"
	"fmt"
	"time"
)

// RedisNode is what an instance trusts of one Redis node: a restart gives
// it a new RunID, a promotion a new ReplID (master_replid).
type RedisNode struct {
	Node   string // cluster node id; "" for a single Redis
	RunID  string
	ReplID string
}

// TrustedRedis returns the Redis nodes the fleet trusts last, by node.
func (s *Store) TrustedRedis(ctx context.Context) (map[string]RedisNode, error) {
	rows, err := s.query(ctx, s.db, "SELECT node, run_id, replid FROM redis_trust")
	if err != nil {
		return nil, fmt.Errorf("store: read trusted redis nodes: %w", err)
	}
	defer rows.Close()
	out := map[string]RedisNode{}
	for rows.Next() {
		var n RedisNode
		if err := rows.Scan(&n.Node, &n.RunID, &n.ReplID); err != nil {
			return nil, fmt.Errorf("store: read trusted redis nodes: %w", err)
		}
		out[n.Node] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read trusted redis nodes: %w", err)
	}
	return out, nil
}

// TrustRedis records nodes as trusted by the instance named by, at now.
func (s *Store) TrustRedis(ctx context.Context, nodes []RedisNode, by string, now time.Time) error {
	for _, n := range nodes {
		_, err := s.exec(ctx, s.db, `INSERT INTO redis_trust (node, run_id, replid, trusted_at, trusted_by) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (node) DO UPDATE SET run_id = excluded.run_id, replid = excluded.replid,
				trusted_at = excluded.trusted_at, trusted_by = excluded.trusted_by`,
			n.Node, n.RunID, n.ReplID, ms(now), by)
		if err != nil {
			return fmt.Errorf("store: trust redis node %q: %w", n.Node, err)
		}
	}
	return nil
}
