// Package service is seckill's HTTP service: the API of the contract, the
// order pipeline into the database, and the reconciliation loop, wired on
// Redis (or an embedded stand-in) and PostgreSQL (or an embedded SQLite).
package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/seckill/seckill/internal/admission"
	"github.com/seckill/seckill/internal/failover"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/ratelimit"
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/ttlcache"
)

// Config is the service's configuration; see the contract for each field's
// environment variable and flag. Zero values mean the defaults.
type Config struct {
	Addr              string   // default 127.0.0.1:8080; ":0" picks a free port
	RedisURL          string   // redis://...; empty and no cluster: embedded server
	RedisClusterAddrs []string // seeds of a Redis Cluster
	DatabaseURL       string   // postgres://... or sqlite://PATH; empty: sqlite file seckill.db
	DatabaseSchema    string   // PostgreSQL schema of the tables (store.OpenSchema); empty: the URL's search_path, else store.DefaultSchema
	AdminToken        string   // empty: generated and logged once
	JWTSecret         string   // empty: generated and logged once
	KeyPrefix         string   // default "seckill"; the database belongs to one (store.ClaimKeyPrefix)
	Logger            *slog.Logger

	// RedisOptions and RedisClusterOptions, set instead of RedisURL and
	// RedisClusterAddrs, name the Redis to use as go-redis options (a
	// client's Options()): the service makes its own clients from copies
	// of them (its API's pool, its order consumer's, its probe's), with
	// the options' address, credentials, TLS, timeouts and retries, and
	// sets on the copies what it sets on every client of its own: a
	// connection name, its check of each new connection and node (degraded
	// mode; an OnConnect of the options runs after it), no CLIENT SETINFO,
	// no client-side cache, and the pool sizes of its consumer's and
	// probe's; each client has its own push-notification processor (not
	// the one a client's Options() carry: redisconn.go). The options
	// themselves are never changed, and a client they came from stays the
	// caller's, to use and to close, before and after Shutdown. (A cluster's seeds are ordered masters first as for
	// RedisClusterAddrs, when a seed answers CLUSTER SLOTS without
	// credentials; else they are used as given.)
	RedisOptions        *redis.Options
	RedisClusterOptions *redis.ClusterOptions
	// NoListener: Start listens on nothing and serves nothing (Addr is not
	// used); Handler is the whole API, to mount on a server of the
	// caller's, and URL is "". That server's limits are the caller's to set
	// (timeouts, header sizes: Start's are in service.go), as is the
	// refusal of requests whose framing two readers could read apart
	// (framing.go). Shutdown still stops every background loop and ends the
	// live view's streams.
	NoListener bool

	// Pipeline tunes the order consumer (tests shorten its timings).
	Pipeline pipeline.Options
	// ReconcileEvery is the period of the reconciliation loop; default 30s,
	// negative turns it off.
	ReconcileEvery time.Duration
	// ExpireEvery is how often the expiry loop looks for reservations past
	// their payment deadline (internal/service/pay.go); default 250ms, negative
	// turns it off (another instance expires them).
	ExpireEvery time.Duration
	// ArchiveEvery is the period of the archiver, which removes the Redis
	// keys of sales that have ended and are all in the database (archive/);
	// default 2s, negative turns it off.
	ArchiveEvery time.Duration
	// Rate limits of the buying flow, each a ratelimit.ParseLimit spec
	// ("5/s,burst=10") or "off". Defaults: DefaultRateLimitUser per user,
	// off per client address and per sale. See limits.go.
	RateLimitUser, RateLimitIP, RateLimitSale string
	// TrustedProxies are addresses or CIDR prefixes of proxies whose
	// X-Forwarded-For is believed when finding a client's address.
	TrustedProxies []string
	// Instances is how many service instances share the rate limits: when
	// Redis cannot be asked, each enforces 1/Instances of them. Default 1.
	Instances int
	// HTTPServer is the server the API runs on: HTTPServerNet (net/http,
	// the default) or HTTPServerFast (fasthttp; the buy natively, the
	// rest through fasthttpadaptor: fast.go). `seckill serve` runs fasthttp.
	HTTPServer string
	// Challenge, if set, is asked before issuing a purchase token.
	Challenge Challenge

	// SampleEvery is the period of the live view behind the dashboard and
	// the per-sale metrics; default 1s, negative turns it off.
	SampleEvery time.Duration

	// Degraded mode (package failover): DegradedTick is how often an instance
	// pings Redis and reads who sells (default 1s); DegradedGrace is how
	// long Redis must be unreachable from every instance before the
	// database sells, how long after that switch the database begins, and
	// how long Redis must answer again before it is repaired and sells
	// again (default 3 ticks; with only the grace set, the tick is a third
	// of it). AckRing is how many of its latest
	// acknowledged orders an instance keeps to hand to the database when it
	// begins selling (default 131072). DegradedTick < 0 turns degraded mode
	// off for this instance entirely (a library user's choice; operators
	// use the setting).
	DegradedTick, DegradedGrace time.Duration
	AckRing                     int
	// NodeRecheck is how long a Redis node's role check holds before the
	// next command sent to it checks it again (failover.Config.Recheck;
	// default the tick).
	NodeRecheck time.Duration

	// LiveStreamsPerClient and LiveStreams cap the live view's event
	// streams (GET /v1/live) per client (an IPv4 address, an IPv6 /64) and
	// in all; defaults DefaultLiveStreamsPerClient and DefaultLiveStreams
	// (streams.go).
	LiveStreamsPerClient, LiveStreams int
}

// Service is a running seckill service.
type Service struct {
	cfg      Config
	log      *slog.Logger
	rdb      redis.UniversalClient // the API's: buys and every request
	consumer redis.UniversalClient // the order consumer's own (roleClient)
	probe    redis.UniversalClient // degraded mode's ping, alone on its connection
	// clusterSeeds: the configured cluster addresses, the masters first
	// (clusterclient.WithMasters).
	clusterSeeds []string
	orders       *pipeline.Consumer
	mini         *miniredis.Miniredis
	miniStop     func()
	db           *store.Store
	eng          *inventory.Engine
	router       *segment.Router         // the engine's sales by id, segmented ones through internal/segment/ (segments.go)
	rooms        *admission.Rooms        // the waiting rooms of sales with one (room.go)
	tokenKey     []byte                  // the key purchase and admission tokens are signed with (tokens.go)
	macs         sync.Pool               // hash.Hash: HMAC-SHA256 under tokenKey (tokenMAC)
	roomStats    roomStats               // the rooms' counts, for the metrics (room_loop.go)
	draws        *ttlcache.Cache[[]byte] // the rooms' draws as published (room.go)
	auth         *auth
	limits       limits
	limiter      *ratelimit.Limiter
	local        *ratelimit.Local  // the limiter's in-process fallback
	queueLimits  *ratelimit.Shards // the rooms' joins and place reads per buyer (room.go)
	metrics      *metrics
	live         *live
	streams      *streamSlots
	seller       *failover.Seller // who sells: Redis, the database, or nobody
	http         *http.Server     // nil when fast serves
	serverLog    *serverLog       // what either server logs of its own
	fast         *fasthttp.Server // Config.HTTPServer "fasthttp" (fast.go)
	listener     net.Listener
	saleCache    *ttlcache.Cache[saleSettings] // sale id -> its settings (see settings)
	archived     *ttlcache.Cache[struct{}]     // sales known archived (close.go): they stay so
	salesList    salesList                     // GET /v1/sales's lists built lately (sales_list.go)
	endpoints    []string                      // "METHOD /path" of every route, as registered

	stop      context.CancelFunc
	bg        sync.WaitGroup // consumer and reconciliation loop
	closing   chan struct{}  // closed when Shutdown begins: ends the live streams
	closeOnce sync.Once
	handler   http.Handler // routes(): what either server serves
}

// The HTTP servers Config.HTTPServer names.
const (
	HTTPServerNet  = "net/http"
	HTTPServerFast = "fasthttp"
)

// The servers' limits, the same for both.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 15 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 16 << 10
)

// closeStreams ends the live streams (once).
func (s *Service) closeStreams() { s.closeOnce.Do(func() { close(s.closing) }) }

// Handler is the service's HTTP API as an http.Handler: what Start serves
// over either server (the buy over fasthttp is served natively, by the
// same code: fast.go), or, with Config.NoListener, the API to mount on a
// server of the caller's.
func (s *Service) Handler() http.Handler { return s.handler }

// Start connects to Redis and the database (or starts the embedded ones),
// migrates, starts the order consumer, the reconciliation loop and the
// HTTP server, and logs one line when ready. Its errors are one line each.
func Start(ctx context.Context, cfg Config) (*Service, error) {
	s := &Service{cfg: cfg, log: cfg.Logger, live: newLive(), closing: make(chan struct{}),
		saleCache: ttlcache.New[saleSettings](maxCachedSales), archived: ttlcache.New[struct{}](maxCachedSales),
		draws: ttlcache.New[[]byte](maxCachedDraw)}
	s.streams = newStreamSlots(cfg.LiveStreamsPerClient, cfg.LiveStreams)
	s.metrics = newMetrics(s)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.seller = failover.New(failover.Config{Tick: cfg.DegradedTick, Grace: cfg.DegradedGrace, AckRing: cfg.AckRing, Recheck: cfg.NodeRecheck,
		Cluster: cfg.cluster(), Logger: s.log,
		OnMode:            s.observeMode,
		Observe:           s.observeBuy,
		BeforeDatabaseBuy: s.limitDatabaseBuy,
		Appended:          func(saleID string) { s.orders.Wake(saleID) },
		Bought:            func(saleID string) { s.orders.Heard(saleID) }})
	if s.cfg.Addr == "" {
		s.cfg.Addr = "127.0.0.1:8080"
	}
	if s.cfg.KeyPrefix == "" {
		s.cfg.KeyPrefix = "seckill"
	}
	if s.cfg.ReconcileEvery == 0 {
		s.cfg.ReconcileEvery = 30 * time.Second
	}
	if s.cfg.SampleEvery == 0 {
		s.cfg.SampleEvery = time.Second
	}
	if s.cfg.ExpireEvery == 0 {
		s.cfg.ExpireEvery = 250 * time.Millisecond
	}
	if err := s.parseLimits(); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()
	if err := s.connectRedis(ctx); err != nil {
		return nil, err
	}
	db, err := store.OpenSchema(ctx, s.cfg.DatabaseURL, s.cfg.DatabaseSchema)
	if err != nil {
		return nil, err
	}
	s.db = db
	// Another prefix's instances would sell the database's sales again.
	if err := db.ClaimKeyPrefix(ctx, s.cfg.KeyPrefix); err != nil {
		return nil, err
	}
	if db.Dialect() == "sqlite" {
		s.log.Warn("using an embedded SQLite database: not for production", "url", orDefault(s.cfg.DatabaseURL, "sqlite://seckill.db"))
	}
	s.secrets()
	s.auth = newAuth(s.cfg.JWTSecret, s.cfg.AdminToken)
	s.tokenKey = tokenKeyOf(s.cfg.JWTSecret)
	// The seller watches the moves between segments: a hand-over carries
	// them with the orders (failover.Seller.BeginMove).
	s.eng = inventory.New(s.rdb, inventory.Options{Prefix: s.cfg.KeyPrefix, Loader: inventory.LoaderFunc(s.loadSale), Moves: s.seller})
	s.router = segment.NewRouter(s.eng, segment.New(s.eng, s.rdb, segment.Options{Directory: s.directory}), s.db.SaleKind)
	s.rooms = admission.NewRooms(s.rdb, s.eng.Key)
	s.rooms.SetFactsMaxAge(roomFactsMaxAge)
	// Loading the scripts sells nothing, and the recovery of a Redis held
	// back after a restart or a promotion needs them: allowed before the
	// first tick repairs it (or the load is refused whenever the node
	// check's Recheck runs out between the first ping and here).
	if err := s.eng.Preload(failover.AllowedToDial(ctx)); err != nil {
		return nil, fmt.Errorf("load scripts into redis: %w", err)
	}
	s.local = ratelimit.NewLocal(ratelimit.LocalOptions{Instances: s.cfg.Instances})
	s.queueLimits = ratelimit.NewShards(queueLimitShards, ratelimit.LocalOptions{MaxKeys: queueLimitKeys})
	s.limiter = ratelimit.New(s.rdb, ratelimit.Options{
		Prefix:     s.cfg.KeyPrefix,
		Fallback:   s.local,
		OnFallback: func(string, error) { s.live.lastFallback.Store(time.Now().UnixNano()) },
	})

	switch s.cfg.HTTPServer {
	case "", HTTPServerNet, HTTPServerFast:
	default:
		return nil, fmt.Errorf("unknown http server %q (want %s or %s)", s.cfg.HTTPServer, HTTPServerNet, HTTPServerFast)
	}
	handler := s.routes()
	s.handler = handler
	if !s.cfg.NoListener {
		if err := s.listen(handler); err != nil {
			return nil, err
		}
	}
	bgCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = stop
	s.startBackground(bgCtx)
	switch {
	case s.fast != nil:
		go s.serveFast(s.listener)
	case s.http != nil:
		go func() {
			if err := s.http.Serve(framingListener{s.listener}); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("http server", "err", err)
			}
		}()
	}
	ok = true
	where := []any{"addr", s.URL()}
	if s.cfg.NoListener {
		where = []any{"listener", "none (Handler)"}
	}
	s.log.Info("seckill ready", append(where, "database", db.Dialect(), "redis", s.redisName())...)
	return s, nil
}

// listen listens on Config.Addr, and makes the HTTP server of handler that
// Start serves there.
func (s *Service) listen(handler http.Handler) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr, err)
	}
	s.listener = ln
	s.serverLog = newServerLog(s.log, serverLogEvery)
	if s.cfg.HTTPServer == HTTPServerFast {
		s.fast = s.newFastServer(handler)
		return nil
	}
	s.http = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          log.New(s.serverLog, "", 0),
		ConnContext:       framingContext, // with the framingListener Start serves it on
	}
	// A dashboard's event stream never ends by itself: end it when the
	// server shuts down, or Shutdown would wait for it until its deadline.
	s.http.RegisterOnShutdown(s.closeStreams)
	return nil
}

// Run starts the service and runs it until ctx is done, then shuts it down
// gracefully: in-flight requests drain, the consumer finishes its batch.
func Run(ctx context.Context, cfg Config) error {
	s, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	s.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}

// URL is the base URL the service listens on; "" with Config.NoListener.
func (s *Service) URL() string {
	if s.listener == nil {
		return ""
	}
	return "http://" + s.listener.Addr().String()
}

// AdminToken is the operators' bearer token (generated if not configured).
func (s *Service) AdminToken() string { return s.cfg.AdminToken }

// JWTSecret is the secret buyers' tokens are signed with.
func (s *Service) JWTSecret() string { return s.cfg.JWTSecret }

// Endpoints lists every route the service answers, as "METHOD /path" with
// the path's parameters in braces ("GET /v1/sales/{sale}"), sorted.
func (s *Service) Endpoints() []string {
	out := slices.Clone(s.endpoints)
	slices.Sort(out)
	return out
}

// Engine, Redis and Store give tests and the demo the service's parts.
func (s *Service) Engine() *inventory.Engine { return s.eng }

// Redis is the service's Redis client.
func (s *Service) Redis() redis.UniversalClient { return s.rdb }

// Store is the service's database.
func (s *Service) Store() *store.Store { return s.db }

// Shutdown drains HTTP requests, stops the consumer after its current
// batch and every other background loop, and closes the connections.
// Without a listener (Config.NoListener), the requests of the caller's
// server are the caller's to drain; the live view's streams end.
func (s *Service) Shutdown(ctx context.Context) error {
	var err error
	switch {
	case s.fast != nil:
		err = s.shutdownFast(ctx)
	case s.http != nil:
		err = s.http.Shutdown(ctx)
	default:
		s.closeStreams()
	}
	s.stop()
	done := make(chan struct{})
	go func() { s.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, ctx.Err())
	}
	s.close()
	return err
}

func (s *Service) close() {
	if s.serverLog != nil {
		s.serverLog.stop()
	}
	if s.db != nil {
		_ = s.db.Close()
	}
	for _, c := range []redis.UniversalClient{s.rdb, s.consumer, s.probe} {
		if c != nil {
			_ = c.Close()
		}
	}
	if s.mini != nil {
		s.miniStop()
		s.mini.Close()
	}
}

// secrets generates what was not configured, and logs each once.
func (s *Service) secrets() {
	if s.cfg.AdminToken == "" {
		s.cfg.AdminToken = randomHex(24)
		s.log.Warn("generated an admin token for this run (set SECKILL_ADMIN_TOKEN to choose one); it is shown once", "admin_token", s.cfg.AdminToken)
	}
	if s.cfg.JWTSecret == "" {
		s.cfg.JWTSecret = randomHex(32)
		s.log.Warn("generated a JWT secret for this run (set SECKILL_JWT_SECRET to choose one); it is shown once", "jwt_secret", s.cfg.JWTSecret)
	}
}

// loadSale is the engine's Loader: the database, fenced by the stream. The
// stream is read first: if every entry is acknowledged (so committed), the
// database holds everything the stream said.
func (s *Service) loadSale(ctx context.Context, saleID string) (inventory.Snapshot, error) {
	if err := s.refuseArchived(ctx, saleID); err != nil {
		return inventory.Snapshot{}, err
	}
	if err := s.seller.MayRebuild(ctx); err != nil {
		return inventory.Snapshot{}, err
	}
	applied, err := pipeline.Applied(ctx, s.rdb, s.eng, saleID)
	if err != nil {
		return inventory.Snapshot{}, err
	}
	snap, err := s.db.Snapshot(ctx, saleID)
	if err != nil {
		return inventory.Snapshot{}, err
	}
	snap.EventsApplied = applied
	return snap, nil
}

// streamBacklog tells the seller which of a sale's events are still on
// their way to the database.
type streamBacklog struct {
	rdb  redis.UniversalClient
	keys pipeline.StreamKeys
}

func (b streamBacklog) InFlight(ctx context.Context, saleID string) ([]inventory.Event, error) {
	return pipeline.InFlight(ctx, b.rdb, b.keys, saleID)
}

// startBackground runs the order consumer and the reconciliation loop.
func (s *Service) startBackground(ctx context.Context) {
	// Only the consumer and degraded mode's recovery may use a Redis held
	// back after a restart or a promotion (failover.AllowedToDial): the
	// recovery repairs it, and waits for the consumer to drain its streams
	// first. Buys may not, nor may the other loops: the expiry, the
	// archiver, the reconcile and the sampler would act on counters and
	// records that may be behind the database (the archiver also waits
	// while Redis does not sell, the expiry and the reconcile too).
	recovery := failover.AllowedToDial(ctx)
	po := s.cfg.Pipeline
	po.Logger = s.log
	if po.Name == "" {
		// Named after where it listens, so that a process restarted on the
		// same address (after a crash, say) reads the entries it held first,
		// instead of leaving them for the reclaim of idle entries (30 s).
		// Without a listener, after the process, and apart from any other
		// service in it: the entries of one that dies are taken over by the
		// others once its heartbeat stops (failover.Seller.ConsumerAlive),
		// or after the reclaim's idle time.
		host, _ := os.Hostname()
		if s.listener != nil {
			po.Name = "serve-" + host + "-" + s.listener.Addr().String()
		} else {
			po.Name = "serve-" + host + "-pid" + strconv.Itoa(os.Getpid()) + "-" + randomHex(4)
		}
	}
	if s.seller.Ticks() {
		po.Alive = s.seller.ConsumerAlive
	}
	po.OnBatch = func(_ string, n int, took time.Duration) {
		s.metrics.batches.Observe(took.Seconds())
		s.metrics.batchSizes.Observe(float64(n))
		s.metrics.batchEntries.Add(float64(n))
	}
	po.OnDeadLetter = func(sale, _ string) { s.metrics.deadLetters.WithLabelValues(sale).Inc() }
	po.OnRetry = func(string, error) { s.metrics.dbRetries.Inc() }
	po.Readers = s.consumerReaders()
	s.orders = pipeline.New(s.consumer, s.eng, s.db, po)
	s.seller.Wire(failover.Parts{Engine: s.router, Segments: s.router, Store: s.db, Streams: streamBacklog{s.rdb, s.eng},
		Ping: func(ctx context.Context) error { return s.probe.Ping(ctx).Err() }, Consumer: po.Name, Rounds: s.orders.WaitRounds})
	if s.seller.Ticks() {
		// Heartbeat under the consumer's name before it holds an entry: a
		// consumer that dies holding entries before any heartbeat named it
		// is unknown to the others, who then wait the reclaim's idle time
		// (30 s) for them instead of taking them over at once.
		s.seller.Beat(ctx) // the database only
	}
	s.bg.Add(1)
	go func() { defer s.bg.Done(); _ = s.orders.Run(recovery) }()
	if s.seller.Ticks() {
		// Know who sells before the first request. After the consumer has
		// started: the first tick may repair Redis (a promoted master), and
		// the repair waits for the streams to drain, which only this
		// instance's consumer may do (TestStartRecoversAPromotedRedisWithItsOwnConsumer).
		s.seller.Step(recovery)
	}
	if s.cfg.ReconcileEvery > 0 {
		s.bg.Add(1)
		go func() { defer s.bg.Done(); s.reconcileLoop(ctx) }()
	}
	if s.cfg.ExpireEvery > 0 {
		s.bg.Add(1)
		go func() { defer s.bg.Done(); s.expiryLoop(ctx, s.cfg.ExpireEvery) }()
	}
	if s.cfg.ArchiveEvery >= 0 {
		s.bg.Add(1)
		go func() { defer s.bg.Done(); s.runArchiver(ctx) }()
	}
	if s.cfg.SampleEvery > 0 {
		s.bg.Add(1)
		go func() { defer s.bg.Done(); s.sampleLoop(ctx, s.cfg.SampleEvery) }()
	}
	s.bg.Add(1)
	go func() { defer s.bg.Done(); s.finishMovesLoop(ctx) }() // moves.go
	s.bg.Add(1)
	go func() { defer s.bg.Done(); s.roomLoop(ctx) }() // room_loop.go
	if s.seller.Ticks() {
		s.bg.Add(1)
		go func() { defer s.bg.Done(); s.seller.Run(recovery) }()
	}
	// Stock that comes back on any instance clears this one's sold-out flags.
	if sub, ok := s.rdb.(inventory.Subscriber); ok {
		s.bg.Add(1)
		go func() { defer s.bg.Done(); _ = s.eng.WatchStock(ctx, sub) }()
	}
}

// scriptReloads counts script calls of the engine (and the rate limiter)
// that met NOSCRIPT.
func (s *Service) scriptReloads() int64 {
	var n int64
	if s.eng != nil {
		n += s.eng.ScriptReloads()
	}
	if s.limiter != nil {
		n += s.limiter.ScriptReloads()
	}
	return n
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func itoa(i int) string { return strconv.Itoa(i) }
