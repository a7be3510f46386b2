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

// AddScores runs scores.lua for each of adds: a Sync's one by itself, a
// flush's in one pipeline (then EVAL for those Redis has not the script
// of).
func (s *sharedScores) AddScores(ctx context.Context, adds []reputation.ScoreAdd) {
	if len(adds) == 1 {
		a := &adds[0]
		takeScore(a, scoresScript.Run(ctx, s.c, []string{s.prefix + a.Key}, scoreArgs(a)...))
		return
	}
	cmds := make([]*redis.Cmd, len(adds))
	pipe := s.c.Pipeline()
	for i := range adds {
		cmds[i] = scoresScript.EvalSha(ctx, pipe, []string{s.prefix + adds[i].Key}, scoreArgs(&adds[i])...)
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
			cmds[i] = scoresScript.Eval(ctx, pipe, []string{s.prefix + adds[i].Key}, scoreArgs(&adds[i])...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, cmd := range cmds {
		takeScore(&adds[i], cmd)
	}
}

// scoreArgs are scores.lua's arguments for a: the weight, the half-life
// and the time, in µs.
func scoreArgs(a *reputation.ScoreAdd) []any {
	return []any{strconv.FormatFloat(a.Weight, 'g', 17, 64), strconv.FormatInt(a.HalfLife.Microseconds(), 10),
		strconv.FormatInt(a.At.UnixMicro(), 10)}
}

// takeScore sets a's Score and At from scores.lua's reply, or its Err.
func takeScore(a *reputation.ScoreAdd, cmd *redis.Cmd) {
	v, us, err := parseScore(cmd)
	if err != nil {
		a.Err = err
		return
	}
	a.Score, a.At = v, time.UnixMicro(us)
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
