package otellimit_test

import (
	"context"
	"fmt"
	"log"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	otellimit "github.com/apigate/ratelimit/observe/otel"
)

// Example observes a Limiter with otellimit and reads its decisions back
// through the SDK's ManualReader. A service would give New its
// MeterProvider, exporting through OTLP (otlpmetricgrpc or otlpmetrichttp)
// or to Prometheus.
func Example() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	m, err := otellimit.New(provider)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := m.WatchStore("local", store); err != nil {
		log.Fatal(err)
	}
	policy := core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute}
	limiter, err := core.NewLimiter(store, []core.Policy{policy}, core.WithObserver(m))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		limiter.AllowN(context.Background(), "client-1", 1, time.Time{})
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			var points []metricdata.DataPoint[int64]
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				points = d.DataPoints
			case metricdata.Gauge[int64]:
				points = d.DataPoints
			}
			var lines []string // data points come in no set order
			for _, p := range points {
				if p.Value != 0 {
					lines = append(lines, fmt.Sprint(mt.Name, " ", p.Attributes.Encoded(attribute.DefaultEncoder()), " ", p.Value))
				}
			}
			sort.Strings(lines)
			for _, l := range lines {
				fmt.Println(l)
			}
		}
	}
	// Output:
	// ratelimit.decisions limit=api,outcome=allowed 2
	// ratelimit.decisions limit=api,outcome=denied 1
	// ratelimit.near_limit limit=api 1
	// ratelimit.store.health limit=api,state=healthy 1
	// ratelimit.memstore.keys store=local 1
}
