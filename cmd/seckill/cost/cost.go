// Package cost measures what one buy through the HTTP API costs: CPU
// microseconds of the service process, of Redis and of PostgreSQL per
// accepted buy, with buys/s, latency percentiles, Redis's EVALSHA calls and
// the order consumer's catch-up. It is `seckill bench --cost`.
//
// A round starts `<bin> serve` on real Redis and PostgreSQL with a database
// and a key prefix of its own, creates a sale of per-user limit 1 and a
// stock far above what sells, and loads it for a duration with a fresh buyer
// (a pre-signed JWT) per request, from this process (whose CPU is not the
// service's). Its window runs from the load's start until the database
// holds every accepted order, and reads:
//
//   - the service: utime+stime of /proc/PID/stat;
//   - Redis: used_cpu_sys+used_cpu_user of INFO cpu, every command's calls
//     and usec of INFO commandstats (EVALSHA's among them) and the bytes
//     its clients sent and were sent (INFO stats), as before/after deltas
//     (never CONFIG RESETSTAT: the Redis may be shared);
//   - PostgreSQL: /proc/PID/stat of the postmaster's children, sampled
//     through the window; "ours" is the round database's backends and the
//     server's background processes, "all" every process of the server.
//
// Redis and PostgreSQL are server-wide figures: on a shared machine other
// clients' work shows in them, which is why rounds alternate builds and the
// summary is a median.
//
// Each round also measures the references the performance targets are
// ratios of (refs.go): the floor, an HTTP server that only checks a
// buyer's token and answers a fixed body, under the same load, and the
// seeds' one-item script under redis-benchmark on the same Redis; the
// report gives each build's ratios to their medians.
package cost

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/ownredis"
	"github.com/seckill/seckill/internal/service"
)

// Config is one measurement. Builds[0] is build A, Builds[1], if any, B.
type Config struct {
	Builds   []string // binaries whose `serve` is measured
	RedisURL string   // redis://host:port/db
	// OwnRedis: instead of RedisURL, a redis-server of the run's own
	// (from PATH), whose counters only this run moves.
	OwnRedis    bool
	PostgresURL string // postgres://user@host:port[/db]: rounds CREATE DATABASE there
	Conns       int    // closed loop: connections; open loop: at most
	Duration    time.Duration
	Rounds      int
	// OpenRate > 0: the measured load is an open loop at this many
	// requests/s. OpenFraction > 0: each round first runs the closed loop
	// (not measured), then the open loop at this fraction of its buys/s.
	OpenRate     float64
	OpenFraction float64
	// MaxRate bounds the buys/s the pre-signed tokens last for: a round
	// signs Duration × MaxRate (twice that with OpenFraction).
	MaxRate        float64
	CatchUpTimeout time.Duration
	// TimelineDir, if set, is a directory where each open-loop round
	// writes its requests' timeline (loadgen.Attack.Timeline) as
	// round<n><build>.csv.
	TimelineDir string
	// Refs: measure the references the targets are ratios of, once per
	// round (refs.go): the floor, `<FloorBin> bench --floor-serve`, under
	// the closed loop, and the seeds' script under redis-benchmark,
	// SeedCalls calls unpipelined (0: DefaultSeedCalls) and twice as many
	// pipelined. Not under an open loop, nor by RunRoom.
	Refs      bool
	FloorBin  string
	SeedCalls int
	// Room, if set, asks RunRoom for the waiting room's phases, side by
	// side in one serve of Builds[0] (Rounds passes of them).
	Room *RoomConfig
	// Soak, if set, asks RunSoak for one long open loop instead of rounds.
	Soak     *SoakConfig
	Progress io.Writer // a line per round (per phase of a room pass); nil: none
}

// env is what the rounds of one measurement share.
type env struct {
	redis      *redis.Client
	redisURL   string
	ownRedis   *ownredis.Server
	admin      *pgx.Conn
	pgURL      *url.URL
	postmaster int
	secret     string
	adminToken string
	tokens     []string
	floor      []string // the floor's tokens (floorTokens)
	runID      string
}

// Run measures cfg.Rounds rounds of each build, alternating A, B, A, B...
// A failed or interrupted round ends the run; the report holds the rounds
// measured until then.
func Run(ctx context.Context, cfg Config) (Report, error) {
	rep := Report{Builds: cfg.Builds, Conns: cfg.Conns, DurationS: cfg.Duration.Seconds(),
		OpenRate: cfg.OpenRate, OpenFraction: cfg.OpenFraction}
	e, err := open(ctx, cfg)
	if err != nil {
		return rep, err
	}
	defer e.close()
	rep.Redis = e.describeRedis()
	refs := cfg.Refs && cfg.OpenRate == 0 && cfg.OpenFraction == 0
	if cfg.Refs {
		rep.Refs = &References{}
		if !refs {
			rep.Refs.Problems = append(rep.Refs.Problems, "not measured: the targets are ratios under the closed loop, and this run's load is an open loop")
		}
	}
	for n := 1; n <= cfg.Rounds; n++ {
		// The references share each round's conditions: measured before
		// its builds in odd rounds, after them in even ones.
		if refs && n%2 == 1 {
			if err := e.measureRefs(ctx, &cfg, n, rep.Refs); err != nil {
				return rep.summarize(), fmt.Errorf("round %d, references: %w", n, err)
			}
		}
		for i, bin := range cfg.Builds {
			build := string(rune('A' + i))
			tag := fmt.Sprintf("%sr%d%s", e.runID, n, strings.ToLower(build))
			r := &round{cfg: &cfg, env: e, build: build, bin: bin, n: n,
				db: "seckill_cost_" + tag, prefix: "costbench-" + tag, sampler: pgSampler{postmaster: e.postmaster}}
			r.sampler.db = r.db
			res, err := r.run(ctx)
			if err != nil {
				return rep.summarize(), fmt.Errorf("round %d, build %s (%s): %w", n, build, bin, err)
			}
			rep.Results = append(rep.Results, res)
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "round %d build %s: %.0f buys/s, %.1f µs/buy in all\n", n, build, res.BuysPerS, res.TotalUS)
			}
		}
		if refs && n%2 == 0 {
			if err := e.measureRefs(ctx, &cfg, n, rep.Refs); err != nil {
				return rep.summarize(), fmt.Errorf("round %d, references: %w", n, err)
			}
		}
	}
	return rep.summarize(), nil
}

// describeRedis names the Redis measured, and whether it is the run's own.
func (e *env) describeRedis() string {
	if e.ownRedis != nil {
		return "a redis-server of this run's own at " + e.redis.Options().Addr
	}
	return e.redis.Options().Addr
}

// open connects to Redis and PostgreSQL, finds the postmaster, and signs
// the buyers' tokens.
func open(ctx context.Context, cfg Config) (*env, error) {
	e := &env{runID: randomHex(4), secret: randomHex(24), adminToken: randomHex(24), redisURL: cfg.RedisURL}
	if cfg.OwnRedis {
		o, err := ownredis.Start(ctx)
		if err != nil {
			return nil, err
		}
		e.ownRedis, e.redisURL = o, o.URL
	}
	opt, err := redis.ParseURL(e.redisURL)
	if err != nil {
		e.close()
		return nil, fmt.Errorf("--redis %q: %w", e.redisURL, err)
	}
	// A plain dial first: an absent server is then one clear line, not
	// also the client pool's log of its failed dials.
	conn, err := net.DialTimeout(opt.Network, opt.Addr, 3*time.Second)
	if err != nil {
		e.close()
		return nil, fmt.Errorf("no Redis at %s (this mode needs a real Redis; --redis names another, and without it a redis-server of the run's own is started): %v", e.redisURL, err)
	}
	conn.Close()
	e.redis = redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := e.redis.Ping(pctx).Err(); err != nil {
		e.close()
		return nil, fmt.Errorf("no Redis at %s (this mode needs a real Redis; --redis names another, and without it a redis-server of the run's own is started): %v", e.redisURL, err)
	}
	if e.pgURL, err = url.Parse(cfg.PostgresURL); err != nil || (e.pgURL.Scheme != "postgres" && e.pgURL.Scheme != "postgresql") {
		e.close()
		return nil, fmt.Errorf("--pg must be a postgres:// URL, is %q", cfg.PostgresURL)
	}
	if e.admin, err = pgx.Connect(pctx, e.dbURL(strings.TrimPrefix(e.pgURL.Path, "/"))); err != nil {
		e.close()
		return nil, fmt.Errorf("no PostgreSQL at %s (this mode needs a real PostgreSQL; --pg names another): %v", e.pgURL.Redacted(), err)
	}
	var backend int
	if err := e.admin.QueryRow(pctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		e.close()
		return nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	st, err := readProcStat(backend)
	if err != nil {
		e.close()
		return nil, fmt.Errorf("PostgreSQL's processes are not in this machine's /proc (its CPU cannot be read): %w", err)
	}
	e.postmaster = st.PPID
	if err := e.signTokens(ctx, cfg); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// adminExec runs sql on the admin connection, opening a new one first if
// it was closed (pgx closes a connection whose query was cancelled, and
// the clean-up after a Ctrl-C still has a database to drop).
func (e *env) adminExec(ctx context.Context, sql string) error {
	if e.admin.IsClosed() {
		c, err := pgx.Connect(ctx, e.dbURL(strings.TrimPrefix(e.pgURL.Path, "/")))
		if err != nil {
			return err
		}
		e.admin = c
	}
	_, err := e.admin.Exec(ctx, sql)
	return err
}

func (e *env) close() {
	if e.admin != nil {
		_ = e.admin.Close(context.Background())
	}
	if e.redis != nil {
		_ = e.redis.Close()
	}
	if e.ownRedis != nil {
		e.ownRedis.Stop()
	}
}

// signTokens signs one JWT per request a round can send, for buyers
// b1, b2, ...: every request a fresh buyer. Rounds share them (each round
// has its own keys and database).
func (e *env) signTokens(ctx context.Context, cfg Config) error {
	n := cfg.Duration.Seconds() * cfg.MaxRate
	if cfg.OpenRate > 0 {
		n = cfg.Duration.Seconds() * cfg.OpenRate
	}
	if cfg.OpenFraction > 0 {
		n *= 2
	}
	if cfg.Soak != nil {
		n = float64(cfg.Soak.Buyers)
	}
	if cfg.Room != nil {
		// Plain buys and joins after the line's waiting buyers; the
		// admitted buyers are the first ones again, in rooms of their own.
		n = max(n+float64(cfg.Room.Waiting), float64(cfg.Room.Admitted))
	}
	e.tokens = make([]string, int(n)+cfg.Conns+1)
	workers := max(runtime.GOMAXPROCS(0), 1)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(e.tokens) && ctx.Err() == nil; i += workers {
				tok, err := signBuyer(e.secret, fmt.Sprintf("b%d", i+1))
				if err != nil {
					errs[w] = err
					return
				}
				e.tokens[i] = tok
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.Join(errs...)
}

// signBuyer signs a buyer's JWT, valid for a day.
func signBuyer(secret, user string) (string, error) {
	return service.SignUser(secret, user, jwt.MapClaims{"exp": time.Now().Add(24 * time.Hour).Unix()})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
