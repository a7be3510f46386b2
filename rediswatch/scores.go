package rediswatch

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/reputation"
)

//go:embed scores.lua
var scoresSource string

var scoresScript = redis.NewScript(scoresSource)

// NewScores returns the scores of reputation Trackers shared through
// client by every app server, for reputation.Config.Scores. Each Tracker
// keeps its copy in process and sends its signals to Redis, one script a
// score. Its keys are the WithKey key (default "ratelimit:rep") and
// ":s:<client key>" for the clients' scores, ":o:<client key>" for their
// offences, each with a TTL until it has decayed to nothing. WithKey is
// its one option. Give client ContextTimeoutEnabled, so that a slow Redis
// delays a bad request by at most 250 ms.
func NewScores(client redis.UniversalClient, opts ...Option) (reputation.SharedScores, error) {
	if err := checkClient("NewScores", client); err != nil {
		return nil, err
	}
	var c config
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: rediswatch.NewScores: option %d is nil", core.ErrInvalidOption, i)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.poll != 0 || c.max != 0 || c.logger != nil || c.resync != 0 {
		return nil, fmt.Errorf("%w: rediswatch.NewScores: WithKey is its one option", core.ErrInvalidOption)
	}
	if c.key == "" {
		c.key = "ratelimit:rep"
	}
	return &sharedScores{c: client, prefix: c.key + ":"}, nil
}

// sharedScores runs scores.lua for a Tracker's adds: one EVALSHA, or a
// pipeline of them for a batch, each under a key of its own (a Redis
// Cluster slot each).
type sharedScores struct {
	c      redis.UniversalClient
	prefix string
}

// AddScores runs scores.lua for each key: a signal's one by itself, a
// flush's batch in one pipeline (then EVAL for those Redis has not the script
// of).
func (s *sharedScores) AddScores(ctx context.Context, halfLife time.Duration, keys []string, weights []float64, at []time.Time, scores []float64) []error {
	hl := strconv.FormatInt(halfLife.Microseconds(), 10)
	args := func(i int) []any {
		return []any{strconv.FormatFloat(weights[i], 'g', 17, 64), hl, strconv.FormatInt(at[i].UnixMicro(), 10)}
	}
	if len(keys) == 1 {
		if err := takeScore(scoresScript.Run(ctx, s.c, []string{s.prefix + keys[0]}, args(0)...), &scores[0], &at[0]); err != nil {
			return []error{err}
		}
		return nil
	}
	cmds := make([]*redis.Cmd, len(keys))
	pipe := s.c.Pipeline()
	for i, k := range keys {
		cmds[i] = scoresScript.EvalSha(ctx, pipe, []string{s.prefix + k}, args(i)...)
	}
	_, _ = pipe.Exec(ctx) // each command's error is its own
	var retry []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		pipe = s.c.Pipeline()
		for _, i := range retry {
			cmds[i] = scoresScript.Eval(ctx, pipe, []string{s.prefix + keys[i]}, args(i)...)
		}
		_, _ = pipe.Exec(ctx)
	}
	var errs []error
	for i, cmd := range cmds {
		if err := takeScore(cmd, &scores[i], &at[i]); err != nil {
			if errs == nil {
				errs = make([]error, len(keys))
			}
			errs[i] = err
		}
	}
	return errs
}

// takeScore sets score and at from scores.lua's reply, or returns its
// error.
func takeScore(cmd *redis.Cmd, score *float64, at *time.Time) error {
	v, us, err := parseScore(cmd)
	if err != nil {
		return err
	}
	*score, *at = v, time.UnixMicro(us)
	return nil
}

// parseScore reads scores.lua's reply: the score after the add, and its
// time.
func parseScore(cmd *redis.Cmd) (float64, int64, error) {
	res, err := cmd.StringSlice()
	if err != nil {
		return 0, 0, fmt.Errorf("rediswatch: scores: %w", err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("rediswatch: scores: a reply of %d values", len(res))
	}
	v, err := strconv.ParseFloat(res[0], 64)
	if err != nil {
		return 0, 0, fmt.Errorf("rediswatch: scores: %w", err)
	}
	us, err := strconv.ParseInt(res[1], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("rediswatch: scores: %w", err)
	}
	if !(v >= 0) {
		return 0, 0, errors.New("rediswatch: scores: a negative score")
	}
	return v, us, nil
}
