package quota

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TakeWith changes only what the Config lets it, and says so otherwise.
func TestTakeWithNeedsVary(t *testing.T) {
	ctx := context.Background()
	plain, err := New(Config{Algorithm: TokenBucket, Limits: []Limit{{Max: 1, Expiration: 365 * 24 * time.Hour}}})
	require.NoError(t, err)
	for _, tc := range []struct {
		first Limit
		want  string
	}{
		{Limit{Max: 5}, "needs Config.VaryMax"},
		{Limit{Expiration: time.Second}, "needs Config.VaryExpiration"},
		{Limit{Burst: 1 << 31}, "needs Config.VaryMax"},
		{Limit{Burst: -1}, "negative"},
		{Limit{Expiration: -time.Second}, "negative"},
	} {
		_, err := plain.TakeWith(ctx, "k", 1, tc.first)
		assert.ErrorContains(t, err, tc.want, "%+v", tc.first)
	}
	res, err := plain.TakeWith(ctx, "k", 1, Limit{Max: 1, Expiration: 365 * 24 * time.Hour})
	require.NoError(t, err, "the configured values themselves")
	assert.True(t, res.Allowed())

	// With VaryMax, a Burst up to 2^32-1 is exact: a fresh key has it all.
	varying, err := New(Config{Algorithm: TokenBucket, Limits: []Limit{{Max: 1, Expiration: 365 * 24 * time.Hour}}, VaryMax: true})
	require.NoError(t, err)
	res, err = varying.TakeWith(ctx, "k", 1, Limit{Burst: 1 << 31})
	require.NoError(t, err)
	require.True(t, res.Allowed())
	assert.Equal(t, 1<<31, res.Tightest().Limit)
	assert.Equal(t, 1<<31-1, res.Tightest().Remaining)
	assert.Positive(t, res.Tightest().Window)
}

// A Max below 0 is a plan that admits nothing (Fiber's MaxFunc returning
// -1): rejected for good, every time, on a key with room, and nothing is
// counted; 0 is not such a plan but the configured Max.
func TestTakeWithNegativeMaxRejects(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			l, err := New(Config{Algorithm: alg, Limits: []Limit{PerMinute(3)}, VaryMax: true})
			require.NoError(t, err)
			for range 5 {
				res, err := l.TakeWith(ctx, "k", 1, Limit{Max: -1})
				require.NoError(t, err)
				assert.False(t, res.Allowed())
				assert.Equal(t, Never, res.RetryAfter())
				assert.Zero(t, res.Tightest().Remaining)
			}
			res, err := l.TakeWith(ctx, "k", 1, Limit{})
			require.NoError(t, err)
			assert.True(t, res.Allowed())
			assert.Equal(t, 2, res.Tightest().Remaining, "the rejections counted nothing")
		})
	}
}

// Event's Expiration is the window as decided: to the ms, and to the
// step for a quota counted in coarser steps.
func TestExpirationAsDecided(t *testing.T) {
	l, err := New(Config{Limits: []Limit{{Max: 3, Expiration: 1500 * time.Microsecond}}})
	require.NoError(t, err)
	res, err := l.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Millisecond, l.Event("k", 1, &res).Expiration)

	v, err := New(Config{Limits: []Limit{{Max: 3, Expiration: time.Minute}}, VaryExpiration: true})
	require.NoError(t, err)
	res, err = v.TakeWith(context.Background(), "k", 1, Limit{Expiration: 250 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, 250*time.Millisecond, v.Event("k", 1, &res).Expiration, "TakeWith's")
}

// A limiter whose windows vary per call keeps its keys apart from one of
// the same Name with a window of its own: its prefix says so.
func TestVaryExpirationPrefix(t *testing.T) {
	fixed := Config{Limits: []Limit{PerSecond(3)}}
	varying := Config{Limits: []Limit{PerSecond(3)}, VaryExpiration: true}
	require.NoError(t, fixed.fill())
	require.NoError(t, varying.fill())
	a, b := limitsOf(&fixed), limitsOf(&varying)
	assert.Equal(t, "limiter::fw:1s:", keyPrefix(&fixed, FixedWindow, &a, false))
	assert.Equal(t, "limiter::fw:~:", keyPrefix(&varying, FixedWindow, &b, false))
}
