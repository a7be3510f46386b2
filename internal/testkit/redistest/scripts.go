package redistest

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// CountScripts counts the scripts c sends from now on (EVAL, EVALSHA and
// their read-only forms, in pipelines too) and returns the count so far.
// Unlike Scripts, which reads the server's, it counts this client's
// alone: the server's other clients (a poller, an earlier test's
// stragglers, another package's tests under REDIS_URL) do not change it.
func CountScripts(c redis.UniversalClient) func() int64 {
	h := &scriptHook{}
	c.AddHook(h)
	return h.n.Load
}

// scriptHook is CountScripts's go-redis hook.
type scriptHook struct{ n atomic.Int64 }

func (h *scriptHook) count(cmd redis.Cmder) {
	switch strings.ToLower(cmd.Name()) {
	case "eval", "evalsha", "eval_ro", "evalsha_ro":
		h.n.Add(1)
	}
}

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}
