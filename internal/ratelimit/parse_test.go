package ratelimit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/ratelimit"
)

func TestParseLimit(t *testing.T) {
	for _, c := range []struct {
		in   string
		want ratelimit.Limit
	}{
		{"5/s,burst=10", ratelimit.PerSecond(5, 10)},
		{"300/m", ratelimit.PerMinute(300, 299)},
		{"300/m,burst=0", ratelimit.PerMinute(300, 0)},
		{"2/h", ratelimit.PerHour(2, 1)},
		{" 2/500ms , burst=3 ", ratelimit.Limit{Rate: 2, Period: 500 * time.Millisecond, Burst: 3}},
		{"100/m,alg=sliding-window", ratelimit.Sliding(100, time.Minute)},
		{"7/10s,alg=fixed-window", ratelimit.Fixed(7, 10*time.Second)},
		{"7/s,alg=gcra,burst=1", ratelimit.PerSecond(7, 1)},
	} {
		got, err := ratelimit.ParseLimit(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "5", "5/", "/s", "x/s", "0/s", "-1/s", "5/day", "5/0s", "5/-1s", "5/1ns",
		"5/s,burst=-1", "5/s,burst=x", "5/s,alg=leaky", "5/s,alg=fixed-window,burst=2", "5/s,colour=red", "200000/s,alg=sliding-window", "5/9000h"} {
		if l, err := ratelimit.ParseLimit(in); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("ParseLimit(%q) = %+v, %v; want ErrInvalid", in, l, err)
		}
	}
}

// FuzzParseLimit: whatever ParseLimit accepts, String writes back as the
// same limit, and the limit is one AllowN accepts.
func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"5/s,burst=10", "300/m", "2/500ms", "100/m,alg=sliding-window", "7/10s,alg=fixed-window", "1/1us"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ratelimit.ParseLimit(s)
		if err != nil {
			return
		}
		if err := ratelimit.Validate("k", l, 1); err != nil {
			t.Fatalf("ParseLimit(%q) = %+v, which Validate rejects: %v", s, l, err)
		}
		back, err := ratelimit.ParseLimit(l.String())
		if err != nil || back != l {
			t.Fatalf("ParseLimit(%q) = %+v; String %q parses as %+v, %v", s, l, l.String(), back, err)
		}
	})
}
