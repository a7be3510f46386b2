package rediswatch_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/rediswatch"
)

// Every app server builds one Bans over the same Redis; a ban made on any
// of them is in force on all within about 200 ms.
func ExampleNewBans() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	// New loads the bans already in Redis before it returns.
	bans, err := rediswatch.NewBans(context.Background(), client)
	if err != nil {
		log.Fatal(err) // an option out of range, or Redis unreachable at start
	}
	defer bans.Close()

	ctx := context.Background()
	// From an admin endpoint or an abuse detector, on any server:
	if _, err := bans.Ban(ctx, access.Entry{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Reason: "credential stuffing"}, time.Hour); err != nil {
		log.Print(err)
	}
	if _, err := bans.Ban(ctx, access.Entry{Key: "user:42", Reason: "chargeback"}, 0); err != nil { // permanent
		log.Print(err)
	}

	// The flow asks for each request; Match never calls Redis.
	if e, ok := bans.Match(netip.MustParseAddr("203.0.113.9"), "user:7", time.Now()); ok {
		fmt.Println("denied:", e.Reason)
	}

	current, err := bans.List(ctx)
	if err != nil {
		log.Print(err)
	}
	for _, e := range current {
		fmt.Println(e, e.Reason)
	}
	if _, err := bans.Unban(ctx, access.Entry{Key: "user:42"}); err != nil {
		log.Print(err)
	}
}

// An abuse detector bans a burst of addresses in one call: all of them or
// none, in force here when BanMany returns, on the other servers within a
// poll.
func ExampleBans_BanMany() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	bans, err := rediswatch.NewBans(context.Background(), client)
	if err != nil {
		log.Fatal(err)
	}
	defer bans.Close()

	until := time.Now().Add(time.Hour)
	var burst []access.Entry
	for _, a := range []string{"198.51.100.7", "198.51.100.9", "2001:db8::42"} {
		addr := netip.MustParseAddr(a)
		burst = append(burst, access.Entry{Prefix: netip.PrefixFrom(addr, addr.BitLen()), Expires: until, Reason: "credential stuffing"})
	}
	if _, err := bans.BanMany(context.Background(), burst); err != nil {
		log.Print(err) // nothing was banned
	}
}
