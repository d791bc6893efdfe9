package service

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the service's Prometheus metrics, in a registry of its own.
type metrics struct {
	reg          *prometheus.Registry
	buys         *prometheus.CounterVec
	buyLatency   prometheus.Histogram
	batches      prometheus.Histogram
	batchEntries prometheus.Counter
	deadLetters  *prometheus.CounterVec
	dbRetries    prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		buys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_buy_requests_total", Help: "Buy requests by result (ok or the error code).",
		}, []string{"result"}),
		buyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seckill_buy_duration_seconds", Help: "Time the inventory took to answer a buy.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seckill_order_batch_duration_seconds", Help: "Time to store one batch of the order stream.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
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
	}
	m.reg.MustRegister(m.buys, m.buyLatency, m.batches, m.batchEntries, m.deadLetters, m.dbRetries,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

func (m *metrics) observeBuy(err error, took time.Duration) {
	result := "ok"
	if err != nil {
		result = toAPI(err).Code
	}
	m.buys.WithLabelValues(result).Inc()
	m.buyLatency.Observe(took.Seconds())
}
