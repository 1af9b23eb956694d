package redis

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// landedScript is an algorithm's script as the release before this layout
// of a key's ends had it (testdata/landed), for the calls of a replica not
// yet upgraded.
func landedScript(t *testing.T, alg Algorithm) *redis.Script {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", "landed", name))
		require.NoError(t, err)
		return string(b)
	}
	body := map[Algorithm]string{
		FixedWindow: read("fixed_window.lua"), SlidingWindow: read("sliding_window.lua"),
		TokenBucket: read("token_bucket.lua"), SlidingLog: read("sliding_log.lua"),
	}[alg]
	sizes := map[Algorithm]string{FixedWindow: stateSizes(10, 10), SlidingWindow: stateSizes(14, 12), TokenBucket: stateSizes(13, 11), SlidingLog: stateSizes(-1, -1)}[alg]
	prelude := ""
	if alg == SlidingLog {
		prelude = read("sliding_log_prelude.lua")
	}
	return redis.NewScript(sizes + prelude + read("head.lua") + body + read("tail.lua"))
}

// A rolling upgrade from the release before: replicas of that release and
// of this one take turns on one key under the same rules, and together
// they admit exactly the limit, for every algorithm: this release writes a
// key's ends as that one did. (That release reads a value as counts only
// when it ends as its own rules would have it end: a deploy that also
// turns BlockFor or MinInterval on or off must come after the upgrade, as
// docs/algorithms.md says. Between versions of this release it may come
// at any time: see TestRollingDeployTakesTurns.)
func TestUpgradeTakesTurns(t *testing.T) {
	server := redistest.Start(t)
	rdb := server.Client(t)
	c := newClock()
	store := New(server.Client(t), WithClock(c.now), WithoutPipelining()).engine
	ctx := context.Background()
	rulesOf := func(alg Algorithm, block, gap time.Duration) []Rule {
		return []Rule{{Algorithm: alg, Max: 10, Expiration: time.Hour, BlockFor: block, MinInterval: gap}}
	}
	settings := []struct {
		name           string
		block, gap     time.Duration
		newBlk, newGap time.Duration
	}{
		{"none", 0, 0, 0, 0},
		{"BlockFor", time.Second, 0, time.Second, 0},
		{"MinInterval", 0, time.Millisecond, 0, time.Millisecond},
		{"both", time.Second, time.Millisecond, time.Second, time.Millisecond},
		{"longer BlockFor, shorter MinInterval", time.Second, 2 * time.Millisecond, time.Minute, time.Millisecond},
	}
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket, SlidingLog} {
		old := landedScript(t, alg)
		for _, s := range settings {
			t.Run(strconv.Itoa(int(alg))+"/"+s.name, func(t *testing.T) {
				key := "upgrade:" + t.Name()
				oldRules, newRules := rulesOf(alg, s.block, s.gap), rulesOf(alg, s.newBlk, s.newGap)
				results := make([]Result, 1)
				admitted := 0
				for i := range 100 {
					c.at(time.Duration(2*i) * time.Millisecond) // past any MinInterval
					if i%2 == 0 {
						var buf [argMaxSize]byte
						arg, err := store.pack(&buf, oldRules, 1, 0, nil)
						require.NoError(t, err)
						reply, err := old.Run(ctx, rdb, []string{key}, string(arg)).Text()
						require.NoError(t, err)
						if reply[0]&1 == 1 {
							admitted++
						}
						continue
					}
					ok, err := store.TakeAll(ctx, key, newRules, 1, results)
					require.NoError(t, err)
					if ok {
						admitted++
					}
				}
				assert.Equal(t, 10, admitted)
				assert.Positive(t, rdb.PTTL(ctx, key).Val(), "the key has a TTL")
			})
		}
	}
}
