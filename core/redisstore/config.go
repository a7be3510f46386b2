package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
)

// ErrNoEviction is wrapped by the error of CheckConfig when a Redis server
// has a memory limit (maxmemory) and evicts nothing to stay under it
// (maxmemory-policy noeviction, Redis's default): once full, it refuses
// every script with OOM, so every decision fails and the Limiter's
// fail mode decides for every client. Set maxmemory-policy to volatile-ttl
// (see docs/redis.md).
var ErrNoEviction = errors.New("redisstore: maxmemory-policy noeviction")

// configCheckTimeout bounds the check that New starts.
const configCheckTimeout = 5 * time.Second

// WithLogger sets where the Store logs the warning of the check that New
// starts. Without it, the Store logs to slog.Default() as it is at the time
// of logging; a nil l is an error.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: redisstore.WithLogger: nil logger; leave the option out for slog.Default()", core.ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// CheckConfig reads INFO memory from the Redis server (every master of a
// *redis.ClusterClient, every shard of a *redis.Ring) and returns an error
// wrapping ErrNoEviction if one has a maxmemory and the noeviction policy.
// Any other error means the check could not be made: Redis unreachable, or
// INFO denied by an ACL. A server whose INFO lacks those fields passes.
// INFO works where CONFIG is disabled, as on most managed services. A
// readiness probe may call it.
func (s *Store) CheckConfig(ctx context.Context) error {
	var (
		mu   sync.Mutex
		errs []error
	)
	check := func(ctx context.Context, addr string, c redis.UniversalClient) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		if err := checkMemory(addr, info); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		return nil
	}
	node := func(ctx context.Context, c *redis.Client) error { return check(ctx, c.Options().Addr, c) }
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, node)
	case *redis.Ring:
		err = c.ForEachShard(ctx, node)
	case *redis.Client:
		err = node(ctx, c)
	default:
		err = check(ctx, "redis", c)
	}
	if err != nil {
		return fmt.Errorf("redisstore: check config: %w", err)
	}
	return errors.Join(errs...)
}

// checkMemory returns an error wrapping ErrNoEviction if info, the INFO
// memory of the server at addr, reports a maxmemory and the noeviction
// policy.
func checkMemory(addr, info string) error {
	var maxmemory int64
	var policy string
	for line := range strings.Lines(info) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "maxmemory":
			maxmemory, _ = strconv.ParseInt(v, 10, 64)
		case "maxmemory_policy":
			policy = v
		}
	}
	if maxmemory > 0 && policy == "noeviction" {
		return fmt.Errorf("%w: %s has maxmemory %d bytes and refuses every decision when full; "+
			"set maxmemory-policy volatile-ttl", ErrNoEviction, addr, maxmemory)
	}
	return nil
}

// checkAtStart runs CheckConfig once, within s.checkTimeout, logs a
// warning if it finds ErrNoEviction (and any other error at Debug: Redis
// may not be up yet), then closes s.checked. New runs it on a goroutine of
// its own. A client that ignores context deadlines (ContextTimeoutEnabled
// false) still bounds it by its ReadTimeout.
func (s *Store) checkAtStart() {
	defer close(s.checked)
	ctx, cancel := context.WithTimeout(context.Background(), s.checkTimeout)
	defer cancel()
	err := s.CheckConfig(ctx)
	if err == nil {
		return
	}
	l := s.logger
	if l == nil {
		l = slog.Default()
	}
	if errors.Is(err, ErrNoEviction) {
		l.LogAttrs(context.Background(), slog.LevelWarn, "redisstore: Redis will fail every decision once full", slog.String("error", err.Error()))
	} else {
		l.LogAttrs(context.Background(), slog.LevelDebug, "redisstore: Redis configuration not checked", slog.String("error", err.Error()))
	}
}
