package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReplicatedCluster: three shards of one master and one replica cover
// every slot; ShardOf agrees with go-redis on where keys live; a killed
// master's replica takes over its slots, keeping the writes it had
// replicated.
func TestReplicatedCluster(t *testing.T) {
	c := StartReplicatedCluster(t)
	ctx := context.Background()
	require.Len(t, c.Nodes(), 6)
	shards := c.Shards()
	require.Len(t, shards, 3)
	slots := 0
	for _, s := range shards {
		require.Len(t, s.Replicas, 1, "master %s", s.Master.Addr())
		assert.NotSame(t, s.Master, s.Replicas[0])
		for _, r := range s.Slots {
			slots += r[1] - r[0] + 1
		}
	}
	assert.Equal(t, 16384, slots)

	cl := c.Client()
	masters := map[string]bool{}
	for i := range 30 {
		k := fmt.Sprintf("redistest:%d", i)
		require.NoError(t, cl.Set(ctx, k, i, time.Minute).Err())
		n, err := cl.MasterForKey(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, n.Options().Addr, c.ShardOf(k).Master.Addr(), k)
		masters[n.Options().Addr] = true
	}
	assert.Len(t, masters, 3)

	const key = "redistest:0"
	s := c.ShardOf(key)
	c.WaitReplicated(s)
	killed := time.Now()
	s.Master.Kill()
	r, at := c.WaitPromoted(s)
	t.Logf("replica %s promoted %v after its master died", r.Addr(), at.Sub(killed))
	assert.Same(t, s.Replicas[0], r)
	assert.GreaterOrEqual(t, at.Sub(killed), FailoverNodeTimeout, "promoted before the node timeout")
	v, err := r.Client().Get(ctx, key).Result()
	require.NoError(t, err, "the promoted replica serves the key")
	assert.Equal(t, "0", v, "the replicated write survived")
}
