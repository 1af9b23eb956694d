package limiter

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A value under a limiter key that is not a state of its rule (another
// program's, or one from before a migration), stored without a TTL, never
// holds the client off for longer than a window: it reads as no state, or
// as the rule's whole quota spent; the key gets a TTL, and the limiter
// writes its own state there once the window has passed. A key of another
// type is an error for that key alone: the request goes to the failure
// policy (FailFallback admits it), the breaker stays closed, and the key
// expires within one window. Other keys keep their counts.
func TestForeignValuesDoNotLockOut(t *testing.T) {
	client := redistest.Start(t).Client(t)
	ctx := context.Background()
	const window = 400 * time.Millisecond
	serverNow := func() int64 {
		tm, err := client.Time(ctx).Result()
		require.NoError(t, err)
		return tm.UnixMilli()
	}
	// sized is a value of the length of alg's one-limit state: its time (6
	// bytes, little-endian ms) then fill.
	//
	// For the log it is a log of 100 entries, at least the fill's count
	// above its Max, all of that time.
	sized := func(alg string, at int64, fill byte) string {
		if alg == "SlidingLog" {
			b := []byte{100, 0}
			for range 100 {
				for i := range 6 {
					b = append(b, byte(at>>(8*i)))
				}
			}
			return string(b)
		}
		size := map[string]int{"FixedWindow": 10, "SlidingWindow": 12, "TokenBucket": 11}[alg]
		b := bytes.Repeat([]byte{fill}, size)
		for i := range 6 {
			b[i] = byte(at >> (8 * i))
		}
		return string(b)
	}
	values := []struct {
		name  string
		write func(t *testing.T, alg, key string)
	}{
		{"all 0xFF", func(t *testing.T, alg, key string) {
			require.NoError(t, client.Set(ctx, key, strings.Repeat("\xff", len(sized(alg, 0, 0))), 0).Err())
		}},
		{"huge count now", func(t *testing.T, alg, key string) {
			require.NoError(t, client.Set(ctx, key, sized(alg, serverNow(), 0xff), 0).Err())
		}},
		{"short", func(t *testing.T, alg, key string) {
			require.NoError(t, client.Set(ctx, key, "x", 0).Err())
		}},
		{"long", func(t *testing.T, alg, key string) {
			require.NoError(t, client.Set(ctx, key, strings.Repeat("y", 100), 0).Err())
		}},
		{"hash", func(t *testing.T, alg, key string) {
			require.NoError(t, client.HSet(ctx, key, "field", "value").Err())
		}},
	}
	for _, alg := range algorithms {
		for _, value := range values {
			t.Run(alg.name+"/"+value.name, func(t *testing.T) {
				name := "foreign-" + alg.name + "-" + strings.ReplaceAll(value.name, " ", "-")
				var reported []error
				replica := replicaHandler(Config{
					Name: name, Max: 3, Expiration: window, LimiterMiddleware: alg.mw,
					Storage:        redis.New(client),
					StorageTimeout: 5 * time.Second, // a loaded machine: only the answers count here
					OnStorageError: func(err error) { reported = append(reported, err) },
				})
				prefix := "limiter:" + name + ":" + map[string]string{"FixedWindow": "fw", "SlidingWindow": "sw", "TokenBucket": "tb", "SlidingLog": "sl"}[alg.name] + ":400ms:"

				// A neighbour has counted two.
				for range 2 {
					code, _ := serveKeyed(replica, "neighbour")
					require.Equal(t, fiber.StatusOK, code)
				}

				neighbour, err := client.Get(ctx, prefix+"neighbour").Result()
				require.NoError(t, err)

				victim := prefix + "victim"
				value.write(t, alg.name, victim)
				code, _ := serveKeyed(replica, "victim")
				after, err := client.Get(ctx, prefix+"neighbour").Result()
				require.NoError(t, err)
				assert.Equal(t, neighbour, after, "the neighbour's state is untouched")
				start := time.Now()
				ttl, err := client.PTTL(ctx, victim).Result()
				require.NoError(t, err)
				assert.Positive(t, ttl, "the key has a TTL after the first request")
				assert.LessOrEqual(t, ttl, 62*time.Second+2*window, "a TTL no longer than the value can matter")

				// Admitted through Redis within a window (plus this
				// machine's delays): the key then holds a state of ours.
				for code != fiber.StatusOK || !isString(t, client, victim) {
					require.Less(t, time.Since(start), window+2*time.Second, "still held off: last status %d", code)
					time.Sleep(20 * time.Millisecond)
					code, _ = serveKeyed(replica, "victim")
				}
				ttl, err = client.PTTL(ctx, victim).Result()
				require.NoError(t, err)
				assert.Positive(t, ttl)

				if value.name == "hash" {
					require.NotEmpty(t, reported, "the wrong type is reported")
					assert.Contains(t, reported[0].Error(), "WRONGTYPE")
					var se *StorageError
					require.ErrorAs(t, reported[0], &se)
					assert.False(t, se.BreakerOpen, "an error of one key does not open the breaker")
				} else {
					assert.Empty(t, reported)
				}
			})
		}
	}
}

// isString reports whether key exists and holds a string.
func isString(t *testing.T, client *goredis.Client, key string) bool {
	t.Helper()
	typ, err := client.Type(context.Background(), key).Result()
	require.NoError(t, err)
	return typ == "string"
}
