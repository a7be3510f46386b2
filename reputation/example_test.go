package reputation_test

import (
	"context"
	"fmt"
	"log"

	"github.com/apigate/ratelimit/reputation"
)

// An exporter of its own reads what a Tracker has scored and done, as
// promlimit.WatchReputation does at each scrape.
func ExampleTracker_Stats() {
	rep, err := reputation.New(reputation.Config{Bands: []reputation.Band{
		{Name: "suspicious", Above: 2, Scale: 0.5},
		{Name: "abusive", Above: 4, Ban: true},
	}})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for range 5 { // the flow's signals; a scanner walking unknown paths
		rep.Record(ctx, "ip:203.0.113.7", reputation.Unrouted)
	}
	st := rep.Stats()
	for s := reputation.Denied; s <= reputation.Reported; s++ {
		if n := st.Signals[s]; n > 0 {
			fmt.Printf("signals{signal=%q} %d\n", s, n)
		}
	}
	for _, b := range st.Bands {
		fmt.Printf("band %s: %d clients, %d bans\n", b.Name, b.Clients, b.Bans)
	}
	// Output:
	// signals{signal="unrouted"} 5
	// band suspicious: 0 clients, 0 bans
	// band abusive: 1 clients, 1 bans
}
