package sloglimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	sloglimit "github.com/apigate/ratelimit/observe/slog"
)

// A Logger logs a Limiter's denials. The IP key is shown as it is; the
// user key, which could hold anything, only as its digest.
func Example() {
	// Time is left out so that the output is the same on every run.
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	})
	lg, err := sloglimit.New(slog.New(h))
	if err != nil {
		fmt.Println(err)
		return
	}
	store, err := memstore.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	policy := core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute}
	l, err := core.NewLimiter(store, []core.Policy{policy}, core.WithObserver(lg))
	if err != nil {
		fmt.Println(err)
		return
	}

	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, key := range []string{"ip:203.0.113.7", "user:alice"} {
		for range 3 { // the third is denied
			if _, err := l.AllowN(context.Background(), key, 1, now); err != nil {
				fmt.Println(err)
			}
		}
	}
	// Output:
	// level=INFO msg="rate limit: request denied" limit=api outcome=denied cost=1 remaining=0 retry_after=1m0s source=store key=ip:203.0.113.7
	// level=INFO msg="rate limit: request denied" limit=api outcome=denied cost=1 remaining=0 retry_after=1m0s source=store key_hash=dabd1db8d35ab131
}
