package lock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/luascript"
)

// slowReplies is a Client whose script replies come back late: the command
// reaches Redis at once, the answer is held for delay. It records when the
// last command was sent.
type slowReplies struct {
	Client
	delay atomic.Int64 // ns; 0: no delay

	mu   sync.Mutex
	sent time.Time
}

func (s *slowReplies) markSent() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = time.Now()
}

func (s *slowReplies) lastSent() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent
}

func (s *slowReplies) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	s.markSent()
	cmd := s.Client.EvalSha(ctx, sha, keys, args...)
	if !luascript.IsNoScript(cmd.Err()) { // the script did not run: answer at once
		time.Sleep(time.Duration(s.delay.Load()))
	}
	return cmd
}

func (s *slowReplies) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	s.markSent()
	cmd := s.Client.Eval(ctx, src, keys, args...)
	time.Sleep(time.Duration(s.delay.Load()))
	return cmd
}

// Until() counts from when the acquire or renewal was sent, not from when
// its reply arrived (the TTL started running in Redis somewhere in between),
// and leaves the drift allowance.
func TestValidityCountsFromSend(t *testing.T) {
	t.Parallel()
	l0, _ := ownLocker(t)
	slow := &slowReplies{Client: l0.nodes[0]}
	// A large drift allowance, so that leaving it out cannot hide in the
	// scheduling delay between taking the start time and sending.
	l, err := New(slow, Options{DriftFactor: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	const delay = 300 * time.Millisecond
	slow.delay.Store(int64(delay))
	const drift = ttl/4 + 2*time.Millisecond // TTL*DriftFactor + 2ms, as documented
	limit := func() time.Time { return slow.lastSent().Add(ttl - drift) }

	ls := mustAcquire(t, l, "job", WithTTL(ttl), WithoutRenewal())
	defer ls.Release(context.Background())
	if until, max := ls.Until(), limit(); until.After(max) {
		t.Errorf("after Acquire, Until is %v past send+TTL-drift", until.Sub(max))
	}
	if err := ls.Extend(context.Background()); err != nil {
		t.Fatal(err)
	}
	if until, max := ls.Until(), limit(); until.After(max) {
		t.Errorf("after Extend, Until is %v past send+TTL-drift", until.Sub(max))
	}
}
