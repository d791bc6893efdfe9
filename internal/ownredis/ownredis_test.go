package ownredis

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestStartStop: the server answers on its loopback address; Stop ends it
// and removes its dir; without redis-server on PATH, Start says so.
func TestStartStop(t *testing.T) {
	ctx := context.Background()
	s, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	s.Stop()
	s.Stop()
	if conn, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still answers after Stop", s.Addr)
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Errorf("dir %s: %v, want it removed", s.dir, err)
	}

	t.Setenv("PATH", t.TempDir())
	if _, err := Start(ctx); !errors.Is(err, ErrNoServer) {
		t.Errorf("without redis-server on PATH: %v, want ErrNoServer", err)
	}
}
