package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// The archived sales as the service's readers see them: the live view and
// the metrics drop a sale once it is archived, and GET /v1/sales lists the
// archived ones a page at a time.

// Gone returns those of saleIDs that are archived or have no row (a create
// undone), in their order: what can no longer change. One query per 500.
func (s *Store) Gone(ctx context.Context, saleIDs []string) ([]string, error) {
	kept := map[string]bool{}
	for chunk := range slices.Chunk(saleIDs, 500) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := s.query(ctx, s.db, "SELECT id FROM sales WHERE archived_at = 0 AND id IN ("+
			strings.TrimSuffix(strings.Repeat("?,", len(chunk)), ",")+")", args...)
		if err != nil {
			return nil, fmt.Errorf("store: sales gone: %w", err)
		}
		err = scanEach(rows, func() error {
			var id string
			err := rows.Scan(&id)
			kept[id] = true
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("store: sales gone: %w", err)
		}
	}
	var gone []string
	for _, id := range saleIDs {
		if !kept[id] {
			gone = append(gone, id)
		}
	}
	return gone, nil
}

// ArchivedSales returns up to limit archived sales as buyers know them, in
// the database's order of ids, from the first after the id after ("" from
// the start): ordinary sales whose keys are gone, and segmented sales
// every segment of which is archived (under the sale's id, never a
// segment's). A segmented sale with a segment still live is not listed.
func (s *Store) ArchivedSales(ctx context.Context, after string, limit int) ([]string, error) {
	rows, err := s.query(ctx, s.db, `SELECT id FROM (
			SELECT id FROM sales WHERE archived_at <> 0 AND id > ?
				AND NOT EXISTS (SELECT 1 FROM sale_segments g WHERE g.segment_id = sales.id)
			UNION ALL
			SELECT g.sale_id AS id FROM sale_segments g JOIN sales s ON s.id = g.segment_id
				WHERE g.sale_id > ? GROUP BY g.sale_id HAVING MIN(s.archived_at) <> 0
		) a ORDER BY id LIMIT ?`, after, after, limit)
	if err != nil {
		return nil, fmt.Errorf("store: archived sales: %w", err)
	}
	ids, err := scanStrings(rows)
	if err != nil {
		return nil, fmt.Errorf("store: archived sales: %w", err)
	}
	return ids, nil
}
