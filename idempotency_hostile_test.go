package limiter

// Idempotency records under attack: replaced, under hostile keys, planted, repeated when rejected.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/valyala/fasthttp"
)

// RefundIdempotent asks whether the request's record has answered
// repeats, but the record it finds may be a newer one. A (id X) is admitted
// and held; its 8 repeats are served on its record; the 9th repeat, B,
// counts as a new request and replaces the record (0 repeats); A fails:
// its forget finds B's record without repeats, drops it and refunds A; B
// fails: its record is gone, so it is refunded as well. The 8 successful
// repeats were served on a take that was given back: each cycle costs the
// key nothing, so a key of Max 2 gets 8 successful responses per cycle,
// for ever.
func TestIdempotencyRefundAfterRecordReplaced(t *testing.T) {
	srv := redistest.Start(t)
	for _, b := range hostileBackends {
		t.Run(b.name, func(t *testing.T) {
			var clock testClock
			clock.now.Store(1_800_000_000_000)
			holds := map[string]chan struct{}{}
			var mu sync.Mutex
			hold := func(name string) chan struct{} {
				mu.Lock()
				defer mu.Unlock()
				if holds[name] == nil {
					holds[name] = make(chan struct{})
				}
				return holds[name]
			}
			entered := make(chan string, 16)
			shared := newMapStorage()
			var hs []fasthttp.RequestHandler
			for range b.replicas {
				cfg := strict(Config{
					Name: "rt-once-refund", Max: 2, Expiration: time.Hour, SkipFailedRequests: true,
					IdempotencyKey: IdempotencyKeyHeader, KeyGenerator: headerKey, DisableDenyCache: true,
				})
				cfg.clock = clock.millis
				app := fiber.New(fiber.Config{DisableStartupMessage: true})
				app.Use(New(b.storeIn(t, srv, shared, cfg)))
				app.Get("/*", func(c *fiber.Ctx) error {
					if h := c.Get("X-Hold"); h != "" {
						entered <- h
						<-hold(h)
					}
					if c.Get("X-Fail") != "" {
						return c.SendStatus(fiber.StatusInternalServerError)
					}
					return c.SendStatus(fiber.StatusOK)
				})
				hs = append(hs, app.Handler())
			}
			key := t.Name()
			// Memory keeps records per process: use one replica there
			// (and for the Storage path too, whose records are per process).
			h := hs[0]
			succeeded := 0
			for cycle := range 10 {
				id := "X-" + strconv.Itoa(cycle)
				a, bn := "a"+id, "b"+id
				var wg sync.WaitGroup
				wg.Add(2)
				go func() { defer wg.Done(); hostileSend(h, key, "Idempotency-Key", id, "X-Hold", a, "X-Fail", "1") }()
				<-entered
				for range 8 {
					if code, _ := hostileSend(h, key, "Idempotency-Key", id); code == fiber.StatusOK {
						succeeded++
					}
				}
				bDone := make(chan int, 1)
				go func() {
					defer wg.Done()
					code, _ := hostileSend(h, key, "Idempotency-Key", id, "X-Hold", bn, "X-Fail", "1")
					bDone <- code
				}()
				select {
				case <-entered:
				case code := <-bDone:
					// B rejected: the key is spent, as it should be.
					t.Logf("cycle %d: B rejected (%d): the key is spent", cycle, code)
					close(hold(a))
					wg.Wait()
					goto done
				}
				close(hold(a))
				time.Sleep(20 * time.Millisecond) // A's refund first
				close(hold(bn))
				wg.Wait()
			}
		done:
			fresh := 0
			for range 5 {
				if code, _ := hostileSend(h, key); code == fiber.StatusOK {
					fresh++
				}
			}
			t.Logf("%s: successful repeats over 10 cycles: %d; then fresh requests admitted: %d of Max 2", b.name, succeeded, fresh)
			// Each cycle's A answered 8 repeats: it must keep its unit.
			assert.LessOrEqual(t, succeeded, 2*8, "repeats served on takes that were given back")
			assert.Equal(t, 0, fresh, "the key must be spent")
		})
	}
}

// Client-chosen keys cannot name a record. Keys made to look like
// record names (with '!', "once3:", braces, the victim's digest) are spent
// through the limiter; afterwards no state key lies in the records'
// namespace, and a victim's record still answers its 8 repeats and no
// more.
func TestIdempotencyHostileKeys(t *testing.T) {
	srv := redistest.Start(t)
	flushRedis(t, srv)
	var hs []fasthttp.RequestHandler
	for range 3 {
		s := redis.New(goredis.NewClient(&goredis.Options{Addr: srv.Addr()}))
		t.Cleanup(func() { _ = s.Close() })
		hs = append(hs, replicaHandler(strict(Config{
			Name: "rt-once-keys", Max: 3, Expiration: time.Hour, Storage: s, LimiterMiddleware: SlidingLog{},
			IdempotencyKey: IdempotencyKeyHeader,
		})))
	}
	victim := "victim"
	code, _ := hostileSend(hs[0], victim, "Idempotency-Key", "pay-1")
	assert.Equal(t, 200, code)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	keys, _ := c.Keys(ctx, "*").Result()
	var record string
	for _, k := range keys {
		if strings.Contains(k, "!once3:") {
			record = k
		}
	}
	t.Logf("record: %q", record)
	prefix := "limiter:rt-once-keys:sl:1h:"
	hostile := []string{
		"!once3:", "x!once3:" + record, record, strings.TrimPrefix(record, prefix), "{" + record + "}",
		"}{", "{}", "\x00", strings.Repeat("!", 300), "once3:" + record[len(record)-40:],
	}
	for i := range 200 {
		hostile = append(hostile, string([]byte{byte(i), '!', 'o', 'n', 'c', 'e', '3', ':'}))
	}
	for _, k := range hostile {
		for j := range 5 {
			hostileSend(hs[j%3], k, "Idempotency-Key", "pay-"+strconv.Itoa(j%2))
		}
	}
	keys, _ = c.Keys(ctx, "*").Result()
	for _, k := range keys {
		if strings.HasPrefix(k, "limiter:rt-once-keys:sl:1h!") {
			v, _ := c.Get(ctx, k).Result()
			assert.True(t, strings.HasPrefix(v, "once3\x00"), "a record name holding a non-record: %q", k)
		}
	}
	repeats := 0
	for j := range 12 {
		if code, _ := hostileSend(hs[j%3], victim, "Idempotency-Key", "pay-1"); code == 200 {
			repeats++
		}
	}
	// 8 repeats, then the 10th counts (2 left of Max 3), then repeats of it.
	t.Logf("victim's retries admitted: %d of 12", repeats)
	assert.LessOrEqual(t, repeats, 12)
	assert.Empty(t, keysWithoutTTL(t, srv))
}

// Values of every length (random, tagged "once3\0" with a random
// rest, and tagged with a rejection's flags) planted at a request's record
// name on a spent key: only a value of the exact record layout may answer
// (and planting one needs write access to Redis).
func TestIdempotencyPlantedRecordValues(t *testing.T) {
	srv := redistest.Start(t)
	flushRedis(t, srv)
	s := redis.New(goredis.NewClient(&goredis.Options{Addr: srv.Addr()}))
	t.Cleanup(func() { _ = s.Close() })
	h := replicaHandler(strict(Config{Name: "rt-plant", Max: 1, Expiration: time.Hour, Storage: s, IdempotencyKey: IdempotencyKeyHeader, DisableDenyCache: true}))
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	code, _ := hostileSend(h, "k", "Idempotency-Key", "seed")
	assert.Equal(t, 200, code)
	const records = "limiter:rt-plant:fw:1h!once3:"
	keys, _ := c.Keys(ctx, records+"*").Result()
	if len(keys) != 1 {
		t.Fatalf("records: %q", keys)
	}
	seedName := keys[0]
	if recordName(records, "k", "seed", "") != seedName[:len(records)+32] {
		t.Fatalf("digest mismatch: %q", seedName)
	}
	tag := seedName[len(records)+32:]
	good, _ := c.Get(ctx, seedName).Result()
	t.Logf("a real record is %d bytes: %q", len(good), good)
	admitted, planted := 0, 0
	for L := 0; L <= 300; L++ {
		for variant := range 3 {
			b := make([]byte, L)
			for i := range b {
				b[i] = byte(i*31 + L*7 + variant)
			}
			switch variant {
			case 1:
				copy(b, "once3\x00\x01") // an admission's flags
				if L == len(good) {
					continue // the exact layout: a record
				}
			case 2:
				copy(b, "once3\x00\x00") // a rejection's flags
			}
			id := "plant-" + strconv.Itoa(L) + "-" + strconv.Itoa(variant)
			name := recordName(records, "k", id, tag)
			if err := c.Set(ctx, name, b, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			planted++
			if code, _ := hostileSend(h, "k", "Idempotency-Key", id); code == 200 {
				admitted++
				t.Logf("planted value of %d bytes (variant %d) answered", L, variant)
			}
		}
	}
	t.Logf("planted %d values at record names of a spent key: %d admitted", planted, admitted)
	assert.Equal(t, 0, admitted)
}

// recordName is the record name of request id of client key, as
// quota.requestIDOf and recordsOf make it, with the slot tag.
func recordName(records, key, id, tag string) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(key)))
	h.Write(n[:])
	h.Write([]byte(key))
	h.Write([]byte(id))
	sum := h.Sum(nil)
	return records + hex.EncodeToString(sum[:16]) + tag
}

// A replica's deny cache must not reject a repeat of an admitted
// request for longer than a second, even when it holds a plain rejection of
// the key for an hour and a rejection of that very request.
func TestIdempotencyDenyCacheRepeat(t *testing.T) {
	srv := redistest.Start(t)
	flushRedis(t, srv)
	var clock testClock
	clock.now.Store(1_800_000_000_000)
	gate := newHoldGate()
	cfg := strict(Config{Name: "rt-once-deny", Max: 1, Expiration: time.Hour, SkipFailedRequests: true, IdempotencyKey: IdempotencyKeyHeader})
	cfg.clock = clock.millis
	hs := hostileReplicas(t, hostileBackend{"redis", 2}, srv, nil, gate, cfg)
	done := make(chan int)
	go func() {
		code, _ := hostileSend(hs[0], "k", "Idempotency-Key", "a", "X-Hold", "1", "X-Status", "500")
		done <- code
	}()
	<-gate.entered
	code, _ := hostileSend(hs[1], "k")
	assert.Equal(t, 429, code, "plain, spent")
	code, _ = hostileSend(hs[1], "k", "Idempotency-Key", "x")
	assert.Equal(t, 429, code, "x, spent")
	close(gate.release)
	assert.Equal(t, 500, <-done)
	code, _ = hostileSend(hs[0], "k", "Idempotency-Key", "x")
	assert.Equal(t, 200, code, "x admitted after the refund")
	clock.advance(1001 * time.Millisecond)
	code, _ = hostileSend(hs[1], "k", "Idempotency-Key", "x")
	t.Logf("repeat of x on the other replica 1.001 s later: %d", code)
	assert.Equal(t, 200, code, "the repeat of an admitted request")
}
