package service_test

import (
	"database/sql"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/service"
)

// TestDatabaseSchema: Config.DatabaseSchema names the PostgreSQL schema
// of the service's tables.
func TestDatabaseSchema(t *testing.T) {
	u := dbtest.DatabaseURL(t)
	startApp(t, service.Config{DatabaseURL: u, DatabaseSchema: "shop"})
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var where []string
	rows, err := db.Query("SELECT schemaname FROM pg_tables WHERE tablename = 'orders'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		where = append(where, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(where) != 1 || where[0] != "shop" {
		t.Fatalf("the orders table is in %v, want [shop]", where)
	}
}
