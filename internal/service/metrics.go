package service

import (
	"net/http"
	"regexp"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the service's Prometheus metrics, in a registry of its own.
// Events are counted where they happen; the state of each sale (stock,
// orders, backlog, drift) is read from the live view at scrape time, so a
// scrape costs no Redis or database call and a deleted sale's series go.
type metrics struct {
	reg           *prometheus.Registry
	collectors    []prometheus.Collector // ours, for MetricNames
	buys          *prometheus.CounterVec
	buysOK        prometheus.Counter // buys{result="ok"}, looked up once
	buyLatency    prometheus.Histogram
	scriptErrors  prometheus.Counter
	rateLimited   *prometheus.CounterVec
	batches       prometheus.Histogram
	batchSizes    prometheus.Histogram
	batchEntries  prometheus.Counter
	deadLetters   *prometheus.CounterVec
	dbRetries     prometheus.Counter
	repairs       *prometheus.CounterVec
	degraded      prometheus.Gauge
	dbBuys        *prometheus.CounterVec
	paid, expired prometheus.Counter // the payment step (pay.go)
	// the archiver's (close.go)
	archived       prometheus.Counter
	archiveWaiting prometheus.Gauge
	window         *latencyWindow // the live view's
}

func newMetrics(s *Service) *metrics {
	m := &metrics{
		reg:    prometheus.NewRegistry(),
		window: &s.live.latency,
		buys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_buy_requests_total", Help: "Buy requests that reached the inventory, by result (ok or the error code).",
		}, []string{"result"}),
		buyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seckill_buy_duration_seconds", Help: "Time the inventory took to answer a buy.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		scriptErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_script_errors_total", Help: "Buy scripts that failed: Redis unreachable, a corrupt key, an unexpected reply.",
		}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_rate_limited_total", Help: "Requests refused by a rate limit, by the limit's scope (user, ip, sale, token, queue).",
		}, []string{"scope"}),
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seckill_order_batch_duration_seconds", Help: "Time to store one batch of the order stream.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		batchSizes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seckill_order_batch_entries", Help: "Stream entries per stored batch.",
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
		}),
		batchEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_order_entries_stored_total", Help: "Order stream entries stored in the database.",
		}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_order_dead_letters_total", Help: "Order stream entries that can never be stored, by sale.",
		}, []string{"sale"}),
		dbRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_order_store_retries_total", Help: "Batches the database refused for now and that are retried.",
		}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_reconcile_repairs_total", Help: "Repairs of a sale's state in Redis from the database by the reconciliation loop, by sale.",
		}, []string{"sale"}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seckill_degraded_mode", Help: "1 while Redis does not sell: the database sells (degraded mode) or Redis is being repaired from it; 0 while Redis sells.",
		}),
		dbBuys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_degraded_buys_total", Help: "Buys answered by the database in degraded mode, by result (ok or the error code).",
		}, []string{"result"}),
		paid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_orders_paid_total", Help: "Orders awaiting payment that this instance recorded as paid.",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_orders_expired_total", Help: "Orders this instance expired at their payment deadline (their units went back to stock).",
		}),
		archived: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_sales_archived_total", Help: "Sales whose Redis keys this instance's archiver removed (ended, every order in the database); a segmented sale counts once, with its last segment.",
		}),
		archiveWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seckill_sales_awaiting_archive", Help: "Sales that have ended and whose keys are still in Redis (orders in flight, payments awaiting), as of the archiver's last pass.",
		}),
	}
	reloads := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "seckill_script_reloads_total", Help: "Script calls that met NOSCRIPT and sent the script again.",
	}, func() float64 { return float64(s.scriptReloads()) })
	soldOut := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "seckill_sold_out_fast_refusals_total", Help: "Buys refused as sold out by this instance's sold-out flags, without a call to Redis.",
	}, func() float64 {
		if s.eng == nil { // not open yet
			return 0
		}
		return float64(s.eng.SoldOutRefusals())
	})
	m.buysOK = m.buys.WithLabelValues("ok")
	m.collectors = []prometheus.Collector{m.buys, m.buyLatency, m.scriptErrors, m.rateLimited, m.batches, m.batchSizes,
		m.batchEntries, m.deadLetters, m.dbRetries, m.repairs, m.degraded, m.dbBuys, reloads, soldOut, liveCollector{s.live}, m.paid, m.expired, m.archived, m.archiveWaiting, roomCollector{&s.roomStats}}
	m.reg.MustRegister(m.collectors...)
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

func (m *metrics) observeBuy(err error, took time.Duration) {
	if err == nil {
		m.buysOK.Inc()
	} else {
		api := toAPI(err)
		if api.Status >= 500 {
			m.scriptErrors.Inc()
		}
		m.buys.WithLabelValues(api.Code).Inc()
	}
	m.buyLatency.Observe(took.Seconds())
	m.window.observe(took.Seconds())
}

// resultOf is a buy's result label: ok, or the error's code.
func resultOf(err error) string {
	if err == nil {
		return "ok"
	}
	return toAPI(err).Code
}

// MetricNames lists the names of seckill's own metrics (not the Go
// runtime's), sorted: what dashboards and alert rules may refer to.
func (s *Service) MetricNames() []string {
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range s.metrics.collectors {
			c.Describe(ch)
		}
		close(ch)
	}()
	var names []string
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// liveCollector exports the newest live sample.
type liveCollector struct{ l *live }

var (
	descRedisUp    = prometheus.NewDesc("seckill_redis_up", "1 if Redis answered the last sample.", nil, nil)
	descDatabaseUp = prometheus.NewDesc("seckill_database_up", "1 if the database answered the last sample.", nil, nil)
	descDegraded   = prometheus.NewDesc("seckill_rate_limit_degraded",
		"1 if the rate limiter answered from its in-process fallback (Redis unreachable) in the last sample period.", nil, nil)
	descSaleActive = prometheus.NewDesc("seckill_sale_active", "1 if the sale is active (started, not ended, not paused).", []string{"sale"}, nil)
	descRemaining  = prometheus.NewDesc("seckill_stock_remaining", "Units of the item left to sell; -1: unlimited.", []string{"sale", "sku"}, nil)
	descStocked    = prometheus.NewDesc("seckill_stock_stocked", "Units of the item stocked (initial + restocks); -1: unlimited.", []string{"sale", "sku"}, nil)
	descSold       = prometheus.NewDesc("seckill_stock_sold", "Units of the item in live orders.", []string{"sale", "sku"}, nil)
	descAwaiting   = prometheus.NewDesc("seckill_stock_awaiting_payment",
		"Units of the item held by orders awaiting payment (sold, back in stock if unpaid by their deadline).", []string{"sale", "sku"}, nil)
	descSoldOut   = prometheus.NewDesc("seckill_sold_out", "1 if the item has no units left.", []string{"sale", "sku"}, nil)
	descConfirmed = prometheus.NewDesc("seckill_orders_confirmed",
		"Orders of the sale in the database, neither cancelled nor expired (paid ones and ones awaiting payment included).", []string{"sale"}, nil)
	descPaid = prometheus.NewDesc("seckill_orders_paid",
		"Orders of the sale (one with a payment step) in the database, paid and not cancelled.", []string{"sale"}, nil)
	descAwaitingOrders = prometheus.NewDesc("seckill_orders_awaiting_payment",
		"Orders of the sale (one with a payment step) in the database, confirmed and not paid yet.", []string{"sale"}, nil)
	descExpired = prometheus.NewDesc("seckill_orders_expired",
		"Orders of the sale (one with a payment step) in the database that expired unpaid at their deadline.", []string{"sale"}, nil)
	descPending = prometheus.NewDesc("seckill_orders_pending", "Orders of the sale accepted and not yet in the database.", []string{"sale"}, nil)
	descBacklog = prometheus.NewDesc("seckill_order_stream_backlog", "Entries of the sale's order stream not yet stored.", []string{"sale"}, nil)
	descLag     = prometheus.NewDesc("seckill_order_consumer_lag_seconds",
		"Age of the oldest entry of the sale's order stream not yet stored; 0 if none.", []string{"sale"}, nil)
	descDrift = prometheus.NewDesc("seckill_reconcile_drift",
		"Orders in the database + in flight − sold, per item, at the last reconciliation pass; 0 when consistent.", []string{"sale", "sku"}, nil)
	descStockDrift = prometheus.NewDesc("seckill_reconcile_stock_drift",
		"Remaining + sold − stocked, per item, at the last reconciliation pass; 0 when consistent.", []string{"sale", "sku"}, nil)
)

func (c liveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRedisUp, descDatabaseUp, descDegraded, descSaleActive, descRemaining, descStocked,
		descSold, descAwaiting, descSoldOut, descConfirmed, descPaid, descAwaitingOrders, descExpired, descPending, descBacklog, descLag,
		descDrift, descStockDrift} {
		ch <- d
	}
}

func (c liveCollector) Collect(ch chan<- prometheus.Metric) {
	v, _ := c.l.current()
	if v.At.IsZero() {
		return // no sample yet
	}
	gauge := func(d *prometheus.Desc, val float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, val, labels...)
	}
	gauge(descRedisUp, b2f(v.Redis == "ok"))
	gauge(descDatabaseUp, b2f(v.Database == "ok"))
	gauge(descDegraded, b2f(v.RateLimitDegraded))
	for _, sale := range v.Sales {
		if sale.Error != "" && sale.Status == "" {
			continue
		}
		gauge(descSaleActive, b2f(sale.Status == "active"), sale.ID)
		items := sale.Items
		if len(items) > itemSeriesPerSale { // live_bounds.go: the others summed
			o := sumItems(items[itemSeriesPerSale:])
			items = items[:itemSeriesPerSale]
			gauge(descRemaining, float64(o.Remaining), sale.ID, otherItemsLabel)
			gauge(descStocked, float64(o.Stocked), sale.ID, otherItemsLabel)
			gauge(descSold, float64(o.Sold), sale.ID, otherItemsLabel)
			gauge(descSoldOut, b2f(o.SoldOut == o.Count), sale.ID, otherItemsLabel)
			gauge(descAwaiting, float64(o.Awaiting), sale.ID, otherItemsLabel)
			gauge(descDrift, float64(o.Drift), sale.ID, otherItemsLabel)
			gauge(descStockDrift, float64(o.StockDrift), sale.ID, otherItemsLabel)
		}
		for _, it := range items {
			gauge(descRemaining, float64(it.Remaining), sale.ID, it.SKU)
			gauge(descStocked, float64(it.Stocked), sale.ID, it.SKU)
			gauge(descSold, float64(it.Sold), sale.ID, it.SKU)
			gauge(descSoldOut, b2f(it.SoldOut), sale.ID, it.SKU)
			gauge(descAwaiting, float64(it.Awaiting), sale.ID, it.SKU)
			gauge(descDrift, float64(it.Drift), sale.ID, it.SKU)
			gauge(descStockDrift, float64(it.StockDrift), sale.ID, it.SKU)
		}
		if sale.Error != "" {
			continue
		}
		gauge(descConfirmed, float64(sale.Confirmed), sale.ID)
		if sale.PaymentStep {
			gauge(descPaid, float64(sale.Paid), sale.ID)
			gauge(descAwaitingOrders, float64(sale.Awaiting), sale.ID)
			gauge(descExpired, float64(sale.Expired), sale.ID)
		}
		gauge(descPending, float64(sale.Pending), sale.ID)
		gauge(descBacklog, float64(sale.Backlog), sale.ID)
		gauge(descLag, sale.LagSeconds, sale.ID)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
