package distill

import (
	"context"
	"strings"
	"testing"
)

// TestShardReportedAsGiven: a shard index without a shard count is refused
// as given (it was reported as "--shard 1/1").
func TestShardReportedAsGiven(t *testing.T) {
	for _, c := range []struct {
		shard, n int
		want     string
	}{
		{1, 0, "--shard 1/0"},
		{2, 2, "--shard 2/2"},
		{-1, 0, "--shard -1/0"},
	} {
		_, err := Run(context.Background(), nil, Options{Out: "unused", Shard: c.shard, NumShards: c.n})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("shard %d/%d: got %v, want %q", c.shard, c.n, err, c.want)
		}
	}
}
