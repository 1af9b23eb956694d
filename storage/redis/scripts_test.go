package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SCRIPT FLUSH loses the cached scripts; the next Take falls back to EVAL
// and carries on with the same state.
func TestScriptFlush(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			c := newClock()
			store, rdb, _ := newStore(t, c)
			ctx := context.Background()
			rule := Rule{Algorithm: a.alg, Max: 3, Expiration: time.Minute}
			r, err := store.Take(ctx, "k", rule, 1)
			require.NoError(t, err)
			require.Equal(t, int64(2), r.Remaining)

			require.NoError(t, rdb.ScriptFlush(ctx).Err())
			exists, err := rdb.ScriptExists(ctx, scripts[a.alg].Hash()).Result()
			require.NoError(t, err)
			require.Equal(t, []bool{false}, exists)

			r, err = store.Take(ctx, "k", rule, 1)
			require.NoError(t, err)
			assert.True(t, r.Allowed)
			assert.Equal(t, int64(1), r.Remaining, "state kept")
			exists, err = rdb.ScriptExists(ctx, scripts[a.alg].Hash()).Result()
			require.NoError(t, err)
			assert.Equal(t, []bool{true}, exists, "EVAL cached it again")

			r, err = store.Take(ctx, "k", rule, 1)
			require.NoError(t, err)
			assert.True(t, r.Allowed)
			assert.Zero(t, r.Remaining)
		})
	}
}

// commandStats parses INFO commandstats into calls per command.
func commandStats(t *testing.T, rdb *goredis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	stats := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err, line)
				stats[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return stats
}

// sentCounter counts the commands a client sends, by name.
// sentCounter counts the commands a client sends, by name, whether alone or
// in a pipeline, and the round trips: commands sent alone, and pipelines.
type sentCounter struct {
	mu         sync.Mutex
	sent       map[string]int
	roundTrips int
}

func (h *sentCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *sentCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.mu.Lock()
		h.sent[cmd.Name()]++
		h.roundTrips++
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *sentCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.mu.Lock()
		for _, cmd := range cmds {
			h.sent[cmd.Name()]++
		}
		h.roundTrips++
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// One round trip per decision: 100 Takes one after another on a fresh
// server are 100 EVALSHA, plus one EVAL after the first one's NOSCRIPT,
// each its own round trip, pipelined (a pipeline of one) or not.
func TestCommandsPerDecision(t *testing.T) {
	for _, a := range algorithms {
		for _, serverTime := range []bool{false, true} {
			for _, pipelined := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/server time %v/pipelined %v", a.name, serverTime, pipelined), func(t *testing.T) {
					server := redistest.Start(t)
					rdb := server.Client(t)
					// With ContextTimeoutEnabled, so that the Store calls
					// through the client itself, whose hook counts.
					client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), ContextTimeoutEnabled: true})
					t.Cleanup(func() { _ = client.Close() })
					counter := &sentCounter{sent: map[string]int{}}
					client.AddHook(counter)
					var opts []Option
					if !serverTime {
						c := newClock()
						opts = append(opts, WithClock(c.now))
					}
					if !pipelined {
						opts = append(opts, WithoutPipelining())
					}
					store := New(client, opts...).engine
					ctx := context.Background()
					// Open the store's connection before the stats are reset, so
					// that its handshake (HELLO, CLIENT SETINFO) is not counted.
					require.NoError(t, client.Ping(ctx).Err())
					require.NoError(t, rdb.ConfigResetStat(ctx).Err())
					counter.mu.Lock()
					clear(counter.sent)
					counter.roundTrips = 0
					counter.mu.Unlock()

					rule := Rule{Algorithm: a.alg, Max: 50, Expiration: time.Minute}
					for range 100 {
						_, err := store.Take(ctx, "k", rule, 1)
						require.NoError(t, err)
					}
					stats := commandStats(t, rdb)
					t.Logf("commandstats calls: %v; client sent: %v", stats, counter.sent)
					if info, err := rdb.Info(ctx, "commandstats").Result(); err == nil {
						for _, line := range strings.Split(info, "\n") {
							if strings.HasPrefix(line, "cmdstat_eval") {
								t.Log(strings.TrimSpace(line))
							}
						}
					}

					assert.Equal(t, map[string]int{"evalsha": 100, "eval": 1}, counter.sent, "client side")
					assert.Equal(t, 101, counter.roundTrips)
					assert.Equal(t, int64(100), stats["evalsha"])
					assert.LessOrEqual(t, stats["eval"]+stats["script|load"], int64(1))
					// The rest are the stats calls and what the scripts call
					// inside Redis (GET, SET, TIME): no other round trips.
					for name, n := range stats {
						switch name {
						case "evalsha", "eval", "script|load", "config|resetstat", "info":
						case "get":
							assert.Equal(t, int64(100), n, name)
						case "set":
							assert.LessOrEqual(t, n, int64(100), name)
						case "time":
							if serverTime {
								assert.Equal(t, int64(100), n, name)
							} else {
								assert.Fail(t, "TIME called with a client clock")
							}
						default:
							assert.Fail(t, "unexpected command", "%s: %d calls", name, n)
						}
					}
				})
			}
		}
	}
}
