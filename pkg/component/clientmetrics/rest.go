package clientmetrics

import (
	"context"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// restMetrics are the REST client's request results and latencies.
type restMetrics struct {
	latency, rateLimiter latencyVec
	results              resultVec
}

func newRESTMetrics() *restMetrics {
	buckets := []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}
	return &restMetrics{
		latency: latencyVec{prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "rest_client", Name: "request_duration_seconds",
			Help: "Request latency in seconds, by verb and host.", Buckets: buckets}, []string{"verb", "host"})},
		rateLimiter: latencyVec{prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "rest_client", Name: "rate_limiter_duration_seconds",
			Help: "Client-side rate limiter latency in seconds, by verb and host (--kube-api-qps and --kube-api-burst).", Buckets: buckets}, []string{"verb", "host"})},
		results: resultVec{prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "rest_client", Name: "requests_total",
			Help: "HTTP requests, by status code, method and host."}, []string{"code", "method", "host"})},
	}
}

func (m *restMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.latency.HistogramVec, m.rateLimiter.HistogramVec, m.results.CounterVec}
}

type latencyVec struct{ *prometheus.HistogramVec }

var _ clientmetrics.LatencyMetric = latencyVec{}

// Observe records a request's latency by verb and host (not the path:
// object names would make a series per object).
func (l latencyVec) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	l.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

type resultVec struct{ *prometheus.CounterVec }

var _ clientmetrics.ResultMetric = resultVec{}

func (r resultVec) Increment(_ context.Context, code, method, host string) {
	r.WithLabelValues(code, method, host).Inc()
}
