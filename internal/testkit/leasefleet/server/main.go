// Command server is one app server of the lease fleet test (see package
// leasefleet): net/http behind httplimit with the four layers of
// leasefleet.Policies, the global one leased, over Redis. It listens on
// ADDR (a loopback address; 127.0.0.1:0 by default), prints
// "listening on http://..." and serves the API under /api/ and its counts
// (leasefleet.Counts) at /debug/fleet; on SIGTERM it prints its counts
// and exits 0.
//
// The store is Redis at REDIS_URL, or the Redis Cluster whose nodes
// REDIS_CLUSTER lists (host:port, comma-separated), with the key prefix
// PREFIX. It is wrapped in a store that counts the round trips, those for
// the global layer's key apart.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	chilimit "github.com/apigate/ratelimit/adapters/chi"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/leasefleet"
	"github.com/apigate/ratelimit/keyfuncs"
)

// shutdownTimeout bounds the graceful stop.
const shutdownTimeout = 5 * time.Second

// storeTimeout bounds a store call: generous, for a busy machine running
// the fleet under the race detector (redisstore's default is 100ms).
const storeTimeout = 2 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "leasefleet server:", err)
		os.Exit(1)
	}
}

func run() error {
	client, name, err := openClient()
	if err != nil {
		return err
	}
	defer client.Close()
	rs, err := redisstore.New(client, redisstore.WithPrefix(os.Getenv("PREFIX")), redisstore.WithTimeout(storeTimeout))
	if err != nil {
		return err
	}
	defer rs.Close()
	t := newTally()
	store := &countingStore{Store: rs, redis: rs, t: t}
	layers, err := layersOf(leasefleet.Policies())
	if err != nil {
		return err
	}
	flow, err := httplimit.New(store, layers, httplimit.WithCore(core.WithObserver(t)))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(leasefleet.APIPrefix, t.count(chilimit.New(flow)(http.HandlerFunc(t.serveAPI))))
	mux.HandleFunc("GET "+leasefleet.CountsPath, t.serveCounts)

	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		_ = ln.Close()
		return fmt.Errorf("ADDR %s: not a loopback address", addr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Printf("leasefleet server (%s) %shttp://%s\n", name, leasefleet.ListeningPrefix, ln.Addr())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	final, err := json.Marshal(t.counts())
	if err != nil {
		return err
	}
	fmt.Printf("counts %s\nstopped\n", final)
	return nil
}

// openClient returns the Redis client of REDIS_CLUSTER or REDIS_URL, and
// what to call it in the banner.
func openClient() (redis.UniversalClient, string, error) {
	if nodes := os.Getenv("REDIS_CLUSTER"); nodes != "" {
		addrs := strings.Split(nodes, ",")
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: addrs, ContextTimeoutEnabled: true,
			ReadTimeout: storeTimeout, WriteTimeout: storeTimeout,
		})
		return c, "redis cluster " + nodes, nil
	}
	u := os.Getenv("REDIS_URL")
	if u == "" {
		return nil, "", errors.New("neither REDIS_URL nor REDIS_CLUSTER is set")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		return nil, "", fmt.Errorf("REDIS_URL: %w", err)
	}
	opt.ContextTimeoutEnabled = true
	opt.ReadTimeout, opt.WriteTimeout = storeTimeout, storeTimeout
	return redis.NewClient(opt), "redis " + opt.Addr, nil
}

// layersOf returns the layers of policies (global, client, search,
// writes): the global one keyed by one static key, the others by the API
// key in leasefleet.KeyHeader.
func layersOf(policies []core.Policy) ([]httplimit.Layer, error) {
	global, err := keyfuncs.Static(leasefleet.GlobalName)
	if err != nil {
		return nil, err
	}
	apiKey, err := keyfuncs.APIKeyHeader(leasefleet.KeyHeader, nil)
	if err != nil {
		return nil, err
	}
	return []httplimit.Layer{
		{Policy: policies[0], Key: global},
		{Policy: policies[1], Key: apiKey},
		{Policy: policies[2], Key: apiKey, Methods: []string{http.MethodGet}, Routes: []string{leasefleet.SearchPath}},
		{Policy: policies[3], Key: apiKey, Methods: []string{http.MethodPost}},
	}, nil
}
