package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/core/redisstore"
)

// RedisPrefix starts every key the demo writes to Redis, so that it shares
// no state with anything else using the same server.
const RedisPrefix = "ratelimit-demo:"

// redisPingTimeout bounds the check that Redis answers, at start.
const redisPingTimeout = 5 * time.Second

// Store is the store the demo keeps its limits in, with what a person
// should be told about it.
type Store struct {
	// Store is the core.Store itself. It is a named field, not an embedded
	// one, so that a *Store is not mistaken for it: the Limiter calls
	// memstore directly only when it sees memstore's own type.
	Store core.Store
	// Name says which store it is, for the banner: "memory" or
	// "redis at host:port, db N". It never holds a password.
	Name string

	close func() error
}

// Close releases the store: it stops the memory store's janitor, or closes
// the Redis client.
func (s *Store) Close() error { return s.close() }

// OpenStore returns a memory store when redisURL is empty, and otherwise a
// Redis store over a client built from redisURL by redis.ParseURL
// ("redis://[:password@]host:port/db", "rediss://" for TLS), after checking
// that Redis answers. Close it when done.
func OpenStore(ctx context.Context, redisURL string) (*Store, error) {
	if redisURL == "" {
		ms, err := memstore.New()
		if err != nil {
			return nil, err
		}
		return &Store{Store: ms, Name: "memory", close: ms.Close}, nil
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	// As redisstore recommends: let the Limiter's deadline reach the socket,
	// and give up on a silent Redis promptly.
	opt.ContextTimeoutEnabled = true
	if opt.ReadTimeout == 0 {
		opt.ReadTimeout = 500 * time.Millisecond
	}
	if opt.WriteTimeout == 0 {
		opt.WriteTimeout = 500 * time.Millisecond
	}
	client := redis.NewClient(opt)
	rs, err := redisstore.New(client, redisstore.WithPrefix(RedisPrefix))
	if err != nil {
		_ = client.Close()
		return nil, err
	}

	pctx, cancel := context.WithTimeout(ctx, redisPingTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis at %s does not answer: %w", opt.Addr, err)
	}
	name := fmt.Sprintf("redis at %s, db %d", opt.Addr, opt.DB)
	return &Store{Store: rs, Name: name, close: client.Close}, nil
}
