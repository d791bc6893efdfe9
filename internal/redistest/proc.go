package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Ports are drawn from [portLow, portHigh]. Both a port and its cluster bus port
// (port+busOffset) then lie below the usual Linux ephemeral range (32768+), so
// outgoing connections cannot grab them, and a node's port can never be another
// node's bus port (the two ranges are disjoint).
const (
	portLow   = 16000
	portHigh  = 22767
	busOffset = 10000

	startAttempts = 5                // fresh ports tried before giving up
	readyTimeout  = 20 * time.Second // includes AOF replay on Restart
)

var (
	claimedMu sync.Mutex
	claimed   = map[int]bool{} // ports handed out in this process
)

// freePort returns a port p such that 127.0.0.1:p and 127.0.0.1:p+busOffset can
// both be bound right now and p was not handed out before in this process.
// Another test binary may still take it before redis-server binds it; startProc
// retries in that case.
func freePort() (int, error) {
	claimedMu.Lock()
	defer claimedMu.Unlock()
	for range 200 {
		p := portLow + rand.IntN(portHigh-portLow+1)
		if !claimed[p] && canBind(p) && canBind(p+busOffset) {
			claimed[p] = true
			return p, nil
		}
	}
	return 0, errors.New("redistest: no free loopback port pair found")
}

func canBind(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// proc is one redis-server child process with a fixed port, directory and
// config, which can be killed and started again.
type proc struct {
	port  int
	dir   string
	extra []string // config args appended after the defaults

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been waited for
}

// startProc starts redis-server in dir on a free port. When the server does not
// come up (typically because another process bound the port first) it retries
// with another port.
func startProc(dir string, extra []string) (*proc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	var errs []error
	for range startAttempts {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		p := &proc{port: port, dir: dir, extra: extra}
		if err := p.start(); err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				return nil, err
			}
			errs = append(errs, err)
			continue
		}
		return p, nil
	}
	return nil, fmt.Errorf("redistest: redis-server did not start after %d attempts; last error: %w",
		startAttempts, errs[len(errs)-1])
}

func (p *proc) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

func (p *proc) logPath() string { return filepath.Join(p.dir, "redis.log") }

// args is the full redis-server command line. Later arguments override earlier ones.
func (p *proc) args() []string {
	a := []string{
		"--port", strconv.Itoa(p.port),
		"--bind", "127.0.0.1",
		"--dir", p.dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "no",
	}
	return append(a, p.extra...)
}

// start launches the process (stdout and stderr appended to redis.log in its
// dir) and waits until it answers; on failure the process is killed and the
// error carries the log tail.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running() {
		return fmt.Errorf("redistest: %s is already running", p.addr())
	}
	log, err := os.OpenFile(p.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	cmd := exec.Command("redis-server", p.args()...)
	cmd.Dir = p.dir
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	log.Close() // the child has its own copy
	if err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.cmd, p.done = cmd, done

	if err := p.waitReady(); err != nil {
		p.killLocked()
		return fmt.Errorf("redistest: redis-server on %s: %w\n--- %s (tail) ---\n%s",
			p.addr(), err, p.logPath(), tail(p.logPath(), 15))
	}
	return nil
}

// waitReady polls until the server on p.port is this very process (not some
// other server that took the port) and has finished loading its data.
func (p *proc) waitReady() error {
	pid := strconv.Itoa(p.cmd.Process.Pid)
	deadline := time.Now().Add(readyTimeout)
	for {
		info, err := command(p.addr(), "INFO server persistence")
		if f := fields(info); err == nil && f["process_id"] == pid && f["loading"] == "0" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v (last error: %v)", readyTimeout, err)
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited during startup (%v)", p.cmd.ProcessState)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// command sends one inline command on a fresh connection and returns the
// reply, which must be a simple or bulk string. It is used instead of go-redis
// for polling servers that may be down, so that no client's dial retries or
// circuit breaker get in the way.
func command(addr, cmd string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, cmd+"\r\n"); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "+"), strings.HasPrefix(line, ":"):
		return line[1:], nil
	case strings.HasPrefix(line, "$"):
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("%s: unexpected reply %q", cmd, line)
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", err
		}
		return string(b[:n]), nil
	default:
		return "", fmt.Errorf("%s: %s", cmd, line)
	}
}

// kill SIGKILLs the process and waits for it. Killing a stopped proc is a no-op.
func (p *proc) kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killLocked()
}

func (p *proc) killLocked() error {
	if !p.running() {
		return nil
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: kill %s: %w", p.addr(), err)
	}
	<-p.done
	return nil
}

// alive is running for callers that do not hold p.mu.
func (p *proc) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running()
}

func (p *proc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// tail returns up to n last lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
