// Package latency holds what the exporters of observe/prometheus and
// observe/otel share about the store latency histogram, so that both
// report the same percentiles by default.
package latency

// Buckets returns the default upper bounds, in seconds, of the store
// latency histogram: from a microsecond (the memory store decides in well
// under one) to a second (far past any sane timeout), dense between 100µs
// and 10ms where Redis answers. Each call returns a new slice.
func Buckets() []float64 {
	return []float64{
		1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5,
		1e-4, 2.5e-4, 5e-4,
		1e-3, 2.5e-3, 5e-3,
		0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
	}
}
