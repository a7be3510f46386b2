package scores

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed add.lua
var addSource string

var addScript = redis.NewScript(addSource)

// Redis keeps scores in Redis, shared by every app server: each Add is one
// atomic script that decays the score to the signal's time (Redis TIME
// unless the caller dates it), adds the weight and gives the key a TTL of
// the time it takes to decay below Forgotten. Get reads a copy in process,
// which the server's own Adds keep (no round trip): a score raised on
// another server is seen here at this server's next signal for that key.
type Redis struct {
	c      redis.UniversalClient
	prefix string
	hl     int64
	copy   *Memory
}

// NewRedis returns a Redis store of scores halving every halfLife, under
// keys prefix+key, with a copy in process of at most maxKeys keys.
func NewRedis(c redis.UniversalClient, prefix string, halfLife time.Duration, maxKeys int) (*Redis, error) {
	if c == nil {
		return nil, fmt.Errorf("scores: nil Redis client")
	}
	m, err := NewMemory(halfLife, maxKeys)
	if err != nil {
		return nil, err
	}
	return &Redis{c: c, prefix: prefix, hl: halfLife.Microseconds(), copy: m}, nil
}

// Add adds w to the score of key, at now (the zero Time: Redis TIME), and
// returns the score after it.
func (r *Redis) Add(ctx context.Context, key string, w float64, now time.Time) (float64, error) {
	if err := check(time.Duration(r.hl)*time.Microsecond, w); err != nil {
		return 0, err
	}
	at := ""
	if !now.IsZero() {
		at = strconv.FormatInt(now.UnixMicro(), 10)
	}
	res, err := addScript.Run(ctx, r.c, []string{r.prefix + key}, strconv.FormatFloat(w, 'g', 17, 64), strconv.FormatInt(r.hl, 10), at).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("scores: add: %w", err)
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("scores: add: a reply of %d values", len(res))
	}
	v, err := strconv.ParseFloat(res[0], 64)
	if err != nil {
		return 0, fmt.Errorf("scores: add: %w", err)
	}
	us, err := strconv.ParseInt(res[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("scores: add: %w", err)
	}
	r.copy.set(key, v, us)
	return v, nil
}

// Get returns the score of key at now as this server last saw it.
func (r *Redis) Get(key string, now time.Time) float64 { return r.copy.Get(key, now) }

// Range calls fn with every score this server holds a copy of (see
// Memory.Range).
func (r *Redis) Range(now time.Time, fn func(key string, v float64)) { r.copy.Range(now, fn) }
