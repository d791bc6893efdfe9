package redistest

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a standalone redis-server process owned by one test, listening on
// a free loopback port with its data in a temp dir.
type Server struct {
	p *proc
}

// StartServer starts a redis-server with the defaults (bind 127.0.0.1,
// protected-mode no, save "", appendonly no) followed by args, which override
// them, e.g. "--appendonly", "yes", "--appendfsync", "always".
// It calls tb.Fatalf (with the server log tail) if the server does not come up,
// and kills the server in tb.Cleanup.
func StartServer(tb testing.TB, args ...string) *Server {
	tb.Helper()
	p, err := startProc(tb.TempDir(), args)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() { _ = p.kill() })
	return &Server{p: p}
}

// Addr returns the server's "127.0.0.1:port".
func (s *Server) Addr() string { return s.p.addr() }

// Client returns a new client for the server with short test timeouts,
// closed in tb.Cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:         s.Addr(),
		DialTimeout:  time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill SIGKILLs the server and waits for it to exit. Killing a dead server is a no-op.
func (s *Server) Kill() error { return s.p.kill() }

// Restart starts the killed server again on the same port, with the same
// config and dir (so an AOF is replayed), and returns once it has loaded its
// data and answers. It fails if the server is still running.
func (s *Server) Restart() error { return s.p.start() }
