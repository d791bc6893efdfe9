package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// The database approaches keep the hot item in a table of its own, one row
// (id 1, stock, version), and record every sale as a row of a sales log
// table in the same transaction as the deduction: afterwards the log's row
// count is what was sold, whatever the clients were told.

type dbMethod int

const (
	pessimistic dbMethod = iota
	conditional
	optimistic
)

type dbItem struct {
	db       *sql.DB
	postgres bool
	method   dbMethod
	item     string // table holding the hot item's row
	sales    string // the sales log
	queries  dbQueries
}

// dbQueries are an item's statements, in the dialect's placeholders.
type dbQueries struct {
	lock, read, set, take, insert, takeAndLog, casAndLog, cas string
}

func prepareDB(m dbMethod) func(ctx context.Context, s *Stores, cfg Config, stock int64) (hotItem, error) {
	return func(ctx context.Context, s *Stores, _ Config, stock int64) (hotItem, error) {
		n := strconv.FormatInt(s.items.Add(1), 10)
		it := &dbItem{db: s.DB, postgres: s.Dialect == "postgres", method: m,
			item: s.table("hot" + n + "_item"), sales: s.table("hot" + n + "_sales")}
		create := []string{
			"CREATE TABLE " + it.item + " (id INTEGER PRIMARY KEY, stock BIGINT NOT NULL, version BIGINT NOT NULL)",
			"CREATE TABLE " + it.sales + " (id INTEGER PRIMARY KEY, buyer TEXT NOT NULL)",
		}
		if it.postgres {
			create[1] = "CREATE TABLE " + it.sales + " (id BIGSERIAL PRIMARY KEY, buyer TEXT NOT NULL)"
		}
		for _, q := range create {
			if _, err := s.DB.ExecContext(ctx, q); err != nil {
				_ = it.drop(context.WithoutCancel(ctx))
				return nil, err
			}
		}
		if _, err := s.DB.ExecContext(ctx, it.bind("INSERT INTO "+it.item+" (id, stock, version) VALUES (1, ?, 0)"), stock); err != nil {
			_ = it.drop(context.WithoutCancel(ctx))
			return nil, err
		}
		q := &it.queries
		q.lock = "SELECT stock FROM " + it.item + " WHERE id = 1 FOR UPDATE"
		if !it.postgres {
			q.lock = "SELECT stock FROM " + it.item + " WHERE id = 1" // in a BEGIN IMMEDIATE transaction
		}
		q.read = "SELECT stock, version FROM " + it.item + " WHERE id = 1"
		q.set = it.bind("UPDATE " + it.item + " SET stock = ? WHERE id = 1")
		q.insert = it.bind("INSERT INTO " + it.sales + " (buyer) VALUES (?)")
		q.take = "UPDATE " + it.item + " SET stock = stock - 1 WHERE id = 1 AND stock >= 1"
		q.cas = it.bind("UPDATE " + it.item + " SET stock = ?, version = version + 1 WHERE id = 1 AND version = ?")
		// On PostgreSQL the deduction and its log row go in one statement
		// (so one round trip holds the row lock until the commit): it
		// inserts a row only if the UPDATE matched.
		q.takeAndLog = it.bind("WITH d AS (" + q.take + " RETURNING 1) INSERT INTO " + it.sales + " (buyer) SELECT ? FROM d")
		q.casAndLog = it.bind("WITH d AS (UPDATE " + it.item + " SET stock = ?, version = version + 1 WHERE id = 1 AND version = ? RETURNING 1) INSERT INTO " + it.sales + " (buyer) SELECT ? FROM d")
		return it, nil
	}
}

// bind numbers the ? placeholders of q for PostgreSQL.
func (it *dbItem) bind(q string) string {
	if !it.postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (it *dbItem) buy(ctx context.Context, buyers []string, out []outcome) {
	for i, b := range buyers {
		switch it.method {
		case pessimistic:
			out[i] = it.buyLocked(ctx, b)
		case conditional:
			out[i] = it.buyConditional(ctx, b)
		case optimistic:
			out[i] = it.buyOptimistic(ctx, b)
		}
	}
}

// inTx runs f in a transaction and commits it if f returns true.
func (it *dbItem) inTx(ctx context.Context, f func(tx *sql.Tx) (commit bool, err error)) (bool, error) {
	tx, err := it.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	commit, err := f(tx)
	if err != nil || !commit {
		_ = tx.Rollback()
		return false, err
	}
	return true, tx.Commit()
}

// buyLocked: lock the row, check in Go, write the new stock, log the sale.
func (it *dbItem) buyLocked(ctx context.Context, buyer string) outcome {
	sold, err := it.inTx(ctx, func(tx *sql.Tx) (bool, error) {
		var stock int64
		if err := tx.QueryRowContext(ctx, it.queries.lock).Scan(&stock); err != nil {
			return false, err
		}
		if stock < 1 {
			return false, nil
		}
		if _, err := tx.ExecContext(ctx, it.queries.set, stock-1); err != nil {
			return false, err
		}
		_, err := tx.ExecContext(ctx, it.queries.insert, buyer)
		return err == nil, err
	})
	return outcome{sold: sold, soldOut: err == nil && !sold, err: err}
}

// buyConditional: one UPDATE that only matches while there is stock.
func (it *dbItem) buyConditional(ctx context.Context, buyer string) outcome {
	var (
		sold bool
		err  error
	)
	if it.postgres {
		sold, err = affected(it.db.ExecContext(ctx, it.queries.takeAndLog, buyer))
	} else {
		sold, err = it.inTx(ctx, func(tx *sql.Tx) (bool, error) {
			ok, err := affected(tx.ExecContext(ctx, it.queries.take))
			if !ok || err != nil {
				return false, err
			}
			_, err = tx.ExecContext(ctx, it.queries.insert, buyer)
			return err == nil, err
		})
	}
	return outcome{sold: sold, soldOut: err == nil && !sold, err: err}
}

// buyOptimistic: read stock and version, check in Go, write only if the
// version is unchanged; otherwise read again.
func (it *dbItem) buyOptimistic(ctx context.Context, buyer string) outcome {
	var o outcome
	for {
		var stock, version int64
		if err := it.db.QueryRowContext(ctx, it.queries.read).Scan(&stock, &version); err != nil {
			o.err = err
			return o
		}
		if stock < 1 {
			o.soldOut = true
			return o
		}
		var (
			ok  bool
			err error
		)
		if it.postgres {
			ok, err = affected(it.db.ExecContext(ctx, it.queries.casAndLog, stock-1, version, buyer))
		} else {
			ok, err = it.inTx(ctx, func(tx *sql.Tx) (bool, error) {
				ok, err := affected(tx.ExecContext(ctx, it.queries.cas, stock-1, version))
				if !ok || err != nil {
					return false, err
				}
				_, err = tx.ExecContext(ctx, it.queries.insert, buyer)
				return err == nil, err
			})
		}
		if err != nil {
			o.err = err
			return o
		}
		if ok {
			o.sold = true
			return o
		}
		o.retries++ // another buyer changed the row since we read it
	}
}

// affected reports whether an Exec changed exactly one row.
func affected(r sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := r.RowsAffected()
	if err != nil {
		return false, err
	}
	if n > 1 {
		return false, fmt.Errorf("%d rows changed, want at most 1", n)
	}
	return n == 1, nil
}

func (it *dbItem) count(ctx context.Context) (tally, error) {
	var t tally
	if err := it.db.QueryRowContext(ctx, "SELECT count(*) FROM "+it.sales).Scan(&t.sold); err != nil {
		return t, err
	}
	err := it.db.QueryRowContext(ctx, "SELECT stock FROM "+it.item+" WHERE id = 1").Scan(&t.remaining)
	return t, err
}

func (it *dbItem) drop(ctx context.Context) error {
	_, err1 := it.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+it.sales)
	_, err2 := it.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+it.item)
	if err1 != nil {
		return err1
	}
	return err2
}
