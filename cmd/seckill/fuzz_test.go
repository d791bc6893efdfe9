package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/service"
)

// FuzzList: a comma-separated flag or variable (--redis-cluster,
// --trusted-proxies) splits into its non-blank entries, trimmed, none
// holding a comma, in order; splitting the joined entries again gives
// them back.
func FuzzList(f *testing.F) {
	for _, s := range []string{"", "a", " a , b ,,c ", ",,,", "10.0.0.0/8,192.0.2.1", "\t\n", "a,\u00a0,b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := list(s)
		rest := s
		for _, e := range got {
			if e == "" || e != strings.TrimSpace(e) || strings.Contains(e, ",") {
				t.Fatalf("list(%q) = %q: entry %q", s, got, e)
			}
			i := strings.Index(rest, e)
			if i < 0 {
				t.Fatalf("list(%q) = %q: %q is not in the input, in order", s, got, e)
			}
			rest = rest[i+len(e):]
		}
		if again := list(strings.Join(got, ",")); !slices.Equal(again, got) {
			t.Fatalf("list(%q) = %q, joined and split again %q", s, got, again)
		}
	})
}

// FuzzConfig: serve's configuration from the environment and flags. A flag
// wins over its variable, an empty variable is unset (the default); the
// lists split as list does; --instances must be a whole number >= 1, and
// anything else fails with one line naming it; --log-level and
// --log-format take what slog and the two formats take, and the logger
// then logs exactly from that level up.
func FuzzConfig(f *testing.F) {
	f.Add("127.0.0.1:9090", "redis://127.0.0.1:6379/0", "h1:7000, h2:7001", "10.0.0.0/8", "3", "", false, "info", "text")
	f.Add("", "", "", "", "", "2", true, "", "")
	f.Add(":0", "", ",,", " , ", "0", "-1", true, "debug", "json")
	f.Add("", "", "", "", "x", "", false, "loud", "xml")
	f.Add("", "", "", "", "+7", "007", true, "WARN+2", "json")
	f.Add("", "", "", "", "99999999999999999999", "", false, "error-1", "text")
	f.Fuzz(func(t *testing.T, addr, redisURL, cluster, proxies, instancesEnv, instancesFlag string, useFlag bool, level, format string) {
		env := map[string]string{"SECKILL_ADDR": addr, "SECKILL_REDIS_URL": redisURL, "SECKILL_REDIS_CLUSTER_ADDRS": cluster,
			"SECKILL_TRUSTED_PROXIES": proxies, "SECKILL_INSTANCES": instancesEnv, "SECKILL_LOG_LEVEL": level, "SECKILL_LOG_FORMAT": format}
		fs := flag.NewFlagSet("seckill serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		config := configFlags(fs, func(k string) string { return env[k] })
		logger := logFlags(fs, func(k string) string { return env[k] })
		var args []string
		if useFlag {
			args = []string{"--instances=" + instancesFlag}
		}
		if err := fs.Parse(args); err != nil {
			t.Fatalf("Parse(%q): %v", args, err)
		}
		cfg, err := config()
		instances := fuzzOr(instancesEnv, "1")
		if useFlag {
			instances = instancesFlag
		}
		n, aerr := strconv.Atoi(instances)
		if wantOK := aerr == nil && n >= 1; (err == nil) != wantOK {
			t.Fatalf("--instances %q: config() = %+v, %v", instances, cfg, err)
		}
		if err != nil {
			if !strings.Contains(err.Error(), "--instances") || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("error %q: not one line naming --instances", err)
			}
		} else {
			if cfg.Instances != n || cfg.Addr != fuzzOr(addr, "127.0.0.1:8080") || cfg.RedisURL != redisURL ||
				!slices.Equal(cfg.RedisClusterAddrs, list(cluster)) || !slices.Equal(cfg.TrustedProxies, list(proxies)) ||
				cfg.RateLimitUser != service.DefaultRateLimitUser || cfg.RateLimitIP != "off" || cfg.KeyPrefix != "seckill" {
				t.Fatalf("environment %v gives %+v", env, cfg)
			}
		}

		log, err := logger(io.Discard)
		var lv slog.Level
		lerr := lv.UnmarshalText([]byte(fuzzOr(level, "info")))
		form := fuzzOr(format, "text")
		if wantOK := lerr == nil && (form == "text" || form == "json"); (err == nil) != wantOK {
			t.Fatalf("--log-level %q --log-format %q: %v", level, format, err)
		}
		if err != nil {
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("error %q: more than one line", err)
			}
			return
		}
		if !log.Enabled(context.Background(), lv) || log.Enabled(context.Background(), lv-1) {
			t.Fatalf("--log-level %q: the logger does not log from %v up", level, lv)
		}
	})
}

func fuzzOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
