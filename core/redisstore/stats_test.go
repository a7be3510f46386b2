package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct{ calls, usec, failed int64 }

// commandStats returns INFO commandstats by lower-case command name
// ("evalsha", "zadd", ...). Redis counts the commands a script calls as
// well as the script itself.
func commandStats(ctx context.Context, c redis.UniversalClient) (map[string]cmdStat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	stats := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st cmdStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.calls = n
			case "usec":
				st.usec = n
			case "failed_calls":
				st.failed = n
			default:
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("commandstats: %q: %w", line, err)
			}
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return stats, nil
}
