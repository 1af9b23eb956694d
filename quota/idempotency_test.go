package quota

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TakeIdempotent counts a request once, on every backend and algorithm: a repeat
// of an admitted request gets its first Result again, marked SourceRepeat,
// and counts nothing; a rejected one's retry is decided afresh (it counted
// nothing); a refund of a repeat credits nothing; another id, or another
// key, is another request; an empty id is a Take; one id reused past 8
// repeats counts again, so the limit holds for it.
func TestTakeIdempotent(t *testing.T) {
	for _, b := range everyBackend(t) {
		for _, alg := range allAlgorithms {
			t.Run(b.name+"/"+alg.name(), func(t *testing.T) {
				now := newSettableNow()
				cfg := Config{Algorithm: alg, Limits: []Limit{PerMinute(2)}, Now: now.Now, Name: "once-" + alg.name()}
				b.set(&cfg)
				l, err := New(cfg)
				require.NoError(t, err)
				ctx := context.Background()
				takeIdempotent := func(key, id string) Result {
					t.Helper()
					res, err := l.TakeIdempotent(ctx, key, id, 1)
					require.NoError(t, err)
					return res
				}
				first := takeIdempotent("k", "pay-1")
				require.True(t, first.Allowed())
				require.Equal(t, SourceBackend, first.Source())
				for range 3 {
					again := takeIdempotent("k", "pay-1")
					assert.Equal(t, SourceRepeat, again.Source())
					assert.Equal(t, first.Decisions(), again.Decisions(), "the first Result again")
				}
				after, err := l.Refund(ctx, "k", 1, ptr(takeIdempotent("k", "pay-1")))
				require.NoError(t, err)
				assert.Equal(t, SourceRepeat, after.Source(), "a repeat's refund credits nothing")
				other := takeIdempotent("other", "pay-1")
				assert.True(t, other.Allowed(), "another key's request")
				second := takeIdempotent("k", "pay-2")
				assert.Equal(t, SourceBackend, second.Source())
				rejected := takeIdempotent("k", "pay-3")
				require.False(t, rejected.Allowed(), "pay-1 and pay-2 spent the two")
				again := takeIdempotent("k", "pay-3")
				assert.NotEqual(t, SourceRepeat, again.Source(), "a rejection is decided afresh")
				assert.False(t, again.Allowed())
				plain, err := l.TakeIdempotent(ctx, "k", "", 0)
				require.NoError(t, err)
				assert.Equal(t, SourceBackend, plain.Source())
				assert.Zero(t, plain.Tightest().Remaining, "repeats counted nothing: two taken, none left")

				reused := 0
				for range 20 {
					if res := takeIdempotent("reuse", "same"); res.Source() == SourceBackend && res.Allowed() {
						reused++
					}
				}
				assert.Equal(t, 2, reused, "8 repeats of each admission, then counted: the limit holds")
			})
		}
	}
}

func ptr(v Result) *Result { return &v }

// The Redis backend keeps the records: the guard finds them there by this
// interface, and a method renamed on one side only would fail no build.
var _ recordKeeper = (*redisBackend)(nil)

// A failure policy's answer is not kept: once the store answers again, the
// request's retry is decided by it.
func TestTakeIdempotentKeepsNoFailureAnswer(t *testing.T) {
	store := &failingStorage{mapStorage: mapStorage{m: map[string][]byte{}}}
	l, err := New(Config{Limits: []Limit{PerHour(5)}, Storage: store, FailurePolicy: FailClosed, BreakerFailures: 1 << 20})
	require.NoError(t, err)
	ctx := context.Background()
	store.failing.Store(true)
	res, err := l.TakeIdempotent(ctx, "k", "r", 1)
	require.NoError(t, err)
	require.Equal(t, SourceFailClosed, res.Source())
	store.failing.Store(false)
	res, err = l.TakeIdempotent(ctx, "k", "r", 1)
	require.NoError(t, err)
	assert.Equal(t, SourceBackend, res.Source())
	assert.True(t, res.Allowed())
}

// failingStorage is a mapStorage that fails while failing is set.
type failingStorage struct {
	mapStorage
	failing atomic.Bool
}

func (s *failingStorage) Get(key string) ([]byte, error) {
	if s.failing.Load() {
		return nil, errors.New("storage down")
	}
	return s.mapStorage.Get(key)
}

// A request's record lasts IdempotencyTTL: after it, the same id is a new
// request. In memory and Storage, on the limiter's clock; on Redis, on
// Redis's own.
func TestTakeIdempotentRecordsEnd(t *testing.T) {
	for _, b := range everyBackend(t) {
		t.Run(b.name, func(t *testing.T) {
			now := newSettableNow()
			cfg := Config{Limits: []Limit{PerHour(5)}, Now: now.Now, IdempotencyTTL: 50 * time.Millisecond, Name: "once-ttl"}
			b.set(&cfg)
			l, err := New(cfg)
			require.NoError(t, err)
			ctx := context.Background()
			res, err := l.TakeIdempotent(ctx, "k", "r", 1)
			require.NoError(t, err)
			require.Equal(t, SourceBackend, res.Source())
			now.Add(time.Second)
			require.Eventually(t, func() bool {
				res, err = l.TakeIdempotent(ctx, "k", "r", 0)
				return err == nil && res.Source() == SourceBackend
			}, 5*time.Second, 10*time.Millisecond, "the record ends")
		})
	}
}

// In memory the records are bounded by IdempotencyKeys: past it, the
// oldest go.
func TestTakeIdempotentRecordsAreBounded(t *testing.T) {
	l, err := New(Config{Limits: []Limit{PerHour(1 << 20)}, IdempotencyKeys: idempotencyShards})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 100_000 {
		_, err := l.TakeIdempotent(ctx, "k", strconv.Itoa(i), 1)
		require.NoError(t, err)
	}
	held := 0
	for i := range l.records.shards {
		held += len(l.records.shards[i].records)
	}
	assert.LessOrEqual(t, held, idempotencyShards)
	res, err := l.TakeIdempotent(ctx, "k", "0", 1)
	require.NoError(t, err)
	assert.Equal(t, SourceBackend, res.Source(), "the oldest record went")
	_, err = New(Config{Limits: []Limit{PerHour(1)}, IdempotencyKeys: maxIdempotencyKeys + 1})
	require.ErrorContains(t, err, "IdempotencyKeys")
	_, err = New(Config{Limits: []Limit{PerHour(1)}, IdempotencyTTL: -time.Second})
	require.ErrorContains(t, err, "IdempotencyTTL")
}

// Retries of one request sent at once from three replicas sharing a Redis,
// each with its own client and deny cache, count it once; and in memory,
// retries at once on one limiter do.
func TestTakeIdempotentConcurrent(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		t.Run(alg.name(), func(t *testing.T) {
			var replicas []*Limiter
			for range 3 {
				l, err := New(Config{Algorithm: alg, Limits: []Limit{PerHour(50)}, Redis: server.Client(t), Name: "once-replicas",
					FailurePolicy: FailClosed, StorageTimeout: 10 * time.Second})
				require.NoError(t, err)
				replicas = append(replicas, l)
			}
			mem, err := New(Config{Algorithm: alg, Limits: []Limit{PerHour(50)}})
			require.NoError(t, err)
			for name, pick := range map[string]func(i int) *Limiter{
				"redis":  func(i int) *Limiter { return replicas[i%3] },
				"memory": func(int) *Limiter { return mem },
			} {
				var repeats atomic.Int64
				var wg sync.WaitGroup
				for i := range 36 { // each request and its 8 repeats
					wg.Go(func() {
						res, err := pick(i).TakeIdempotent(context.Background(), "k", "order-"+strconv.Itoa(i%4), 1)
						assert.NoError(t, err)
						assert.True(t, res.Allowed())
						if res.Source() == SourceRepeat {
							repeats.Add(1)
						}
					})
				}
				wg.Wait()
				assert.Equal(t, int64(32), repeats.Load(), "%s: 4 requests, each counted once", name)
				res, err := pick(0).Take(context.Background(), "k", 0)
				require.NoError(t, err)
				assert.Equal(t, 46, res.Tightest().Remaining, name)
			}
		})
	}
}

// A random trace of takes once per request, many of them repeats, with
// plain takes between them, gives the same Results in memory and on Redis,
// for every algorithm: the same decisions, and the same repeats.
func TestTakeIdempotentRedisMatchesMemory(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		t.Run(alg.name(), func(t *testing.T) {
			now := newSettableNow()
			cfg := Config{Algorithm: alg, Limits: []Limit{{Max: 4, Expiration: 500 * time.Millisecond}}, Now: now.Now, Name: "once-diff-" + alg.name()}
			mem, err := New(cfg)
			require.NoError(t, err)
			cfg.Redis, cfg.DisableDenyCache = server.Client(t), true // the deny cache answers for Redis alone
			cfg.StorageTimeout = slowMachine
			red, err := New(cfg)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(9, uint64(alg)))
			ctx := context.Background()
			repeats := 0
			for step := range 1500 {
				now.Add(time.Duration(rng.IntN(40)) * time.Millisecond)
				key := "k" + strconv.Itoa(rng.IntN(3))
				id := ""
				if rng.IntN(4) > 0 {
					id = "r" + strconv.Itoa(rng.IntN(40))
				}
				cost := rng.IntN(3)
				want, err := mem.TakeIdempotent(ctx, key, id, cost)
				require.NoError(t, err)
				got, err := red.TakeIdempotent(ctx, key, id, cost)
				require.NoError(t, err)
				require.Equal(t, want.Source(), got.Source(), "step %d: %s %q cost %d", step, key, id, cost)
				require.Equal(t, want.Decisions(), got.Decisions(), "step %d: %s %q cost %d", step, key, id, cost)
				if want.Source() == SourceRepeat {
					repeats++
				}
			}
			assert.Greater(t, repeats, 100)
		})
	}
}
