package quota

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With VaryExpiration each window keeps a key's state of its own, on
// every backend: a key spent under one window is admitted under another,
// a refund credits the window its take was counted in, and an idempotent
// take and its refund go to the key under the configured window.
func TestVaryExpirationOnEveryBackend(t *testing.T) {
	ctx := context.Background()
	for _, b := range everyBackend(t) {
		t.Run(b.name, func(t *testing.T) {
			cfg := Config{Limits: []Limit{PerMinute(2)}, VaryExpiration: true, Now: newSettableNow().Now, Name: "vary-" + b.name}
			b.set(&cfg)
			l, err := New(cfg)
			require.NoError(t, err)
			take := func(window time.Duration) Result {
				res, err := l.TakeWith(ctx, "k", 1, Limit{Expiration: window})
				require.NoError(t, err)
				return res
			}
			take(time.Minute)
			take(time.Minute)
			rejected := take(time.Minute)
			require.False(t, rejected.Allowed(), "spent under 1m")
			taken := take(time.Hour)
			require.True(t, taken.Allowed(), "a state of its own under 1h")
			assert.Equal(t, 1, taken.Tightest().Remaining)
			after, err := l.Refund(ctx, "k", 1, &taken)
			require.NoError(t, err)
			assert.Equal(t, 2, after.Tightest().Remaining, "credited under 1h")
			assert.Equal(t, time.Hour, after.Tightest().Window)
			rejected = take(time.Minute)
			require.False(t, rejected.Allowed(), "1m still spent")

			first, err := l.TakeIdempotent(ctx, "other", "req", 1)
			require.NoError(t, err)
			require.True(t, first.Allowed())
			repeat, err := l.TakeIdempotent(ctx, "other", "req", 1)
			require.NoError(t, err)
			assert.Equal(t, SourceRepeat, repeat.Source())
			after, err = l.RefundIdempotent(ctx, "other", "req", 1, &first)
			require.NoError(t, err)
			assert.Equal(t, first, after, "a record that answered a repeat is not given back")
		})
	}
}
