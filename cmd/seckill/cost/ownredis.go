package cost

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ownRedis is a redis-server of the measurement's own, on a free loopback
// port in a temp dir, without persistence: its INFO counts only this
// measurement's work, where a shared server's counts every client's.
type ownRedis struct {
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
	URL  string
}

// startOwnRedis starts redis-server (from PATH) and waits until it answers.
func startOwnRedis(ctx context.Context) (*ownRedis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("--own-redis needs redis-server on PATH: %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	dir, err := os.MkdirTemp("", "seckill-cost-redis-")
	if err != nil {
		return nil, err
	}
	o := &ownRedis{dir: dir, done: make(chan struct{}), URL: "redis://" + addr + "/0"}
	o.cmd = exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", "redis.log", "--daemonize", "no")
	if err := o.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() { _ = o.cmd.Wait(); close(o.done) }()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c.Ping(ctx).Err() == nil {
			return o, nil
		}
		select {
		case <-o.done:
			o.stop()
			return nil, fmt.Errorf("redis-server on %s exited at start (%v)", addr, o.cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			o.stop()
			return nil, fmt.Errorf("redis-server on %s does not answer PING after 10s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the server and removes its dir.
func (o *ownRedis) stop() {
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.done:
	case <-time.After(5 * time.Second):
		_ = o.cmd.Process.Kill()
		<-o.done
	}
	_ = os.RemoveAll(o.dir)
}
