// Package ownredis starts a redis-server of a command's own: on a free
// loopback port, in a temp dir, without persistence, stopped and removed
// when the command is done. A measurement on it counts only its own work,
// and it writes to no Redis the user did not name.
package ownredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoServer is returned by Start when redis-server is not on PATH.
var ErrNoServer = errors.New("redis-server is not on PATH")

// Server is a running redis-server of this process's own.
type Server struct {
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
	// Addr is its "127.0.0.1:port"; URL is "redis://" + Addr + "/0".
	Addr, URL string
}

// Start starts redis-server (from PATH) and waits until it answers PING,
// for up to 10 s.
func Start(ctx context.Context) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoServer, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "seckill-redis-")
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := &Server{dir: dir, done: make(chan struct{}), Addr: addr, URL: "redis://" + addr + "/0"}
	s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", "redis.log", "--daemonize", "no")
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c.Ping(ctx).Err() == nil {
			return s, nil
		}
		select {
		case <-s.done:
			s.Stop()
			return nil, fmt.Errorf("redis-server on %s exited at start (%v)", addr, s.cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return nil, fmt.Errorf("redis-server on %s does not answer PING after 10s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop ends the server (SIGTERM, then SIGKILL after 5 s) and removes its
// dir. It is idempotent.
func (s *Server) Stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	_ = os.RemoveAll(s.dir)
}
