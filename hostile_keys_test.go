package limiter

// Hostile keys (huge, binary, shaped like the limiter's own keys) through every backend.

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileKey is one key of the hostile table, with a name for messages
// (the keys themselves may be a megabyte of unprintable bytes).
type hostileKey struct {
	name string
	key  string
}

// hostileKeys are keys a client may make a KeyGenerator return: empty,
// binary, hash tags, invalid UTF-8, text of the Redis key names, header
// syntax, glob syntax, keys around the manager's 64-byte inline limit, long
// keys that differ in one byte only, and a short key equal to the digest the
// manager keeps for a long one. No two are equal.
func hostileKeys() []hostileKey {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	body := strings.Repeat("x", 64<<10-1)
	lastA, lastB := body+"a", body+"b" // 64 KiB each, differing in the last byte only
	digest := sha256.Sum256([]byte(lastA))
	return []hostileKey{
		{"empty", ""},
		{"NUL", "\x00"},
		{"two NULs", "\x00\x00"},
		{"0xFF", "\xff"},
		{"binary with NUL and 0xFF", "a\x00b\xffc\x01\xfe"},
		{"all 256 byte values", string(all)},
		{"open brace", "{"},
		{"close brace", "}"},
		{"reversed braces", "}{"},
		{"empty hash tag", "{}"},
		{"hash tag", "{user}"},
		{"hash tag with suffix", "{user}:42"},
		{"hash tag with prefix", "x{user}"},
		{"invalid UTF-8", "invalid \xc3\x28 utf8"},
		{"lone 0x80", "\x80"},
		{"UTF-16 surrogate", "\xed\xa0\x80"},
		{"overlong NUL", "\xc0\x80"},
		{"valid UTF-8", "ключ-🔑"},
		{"colon", ":"},
		{"two colons", "::"},
		{"x", "x"},
		{"tag and key", "fw:x"},
		{"prefix, fixed tag and key", "limiter:fw:x"},
		{"prefix, sliding tag and key", "limiter:sw:x"},
		{"prefix, token tag and key", "limiter:tb:x"},
		{"prefix only", "limiter:"},
		{"prefix and tag only", "limiter:fw:"},
		{"CR", "\r"},
		{"LF", "\n"},
		{"CRLF", "\r\n"},
		{"header injection", "k\r\nX-Key: x\r\n\r\n"},
		{"glob star", "*"},
		{"glob class", "[a-z]?"},
		{"space", " "},
		{"first byte A", "Akey"},
		{"first byte B", "Bkey"},
		{"64 bytes (inline limit)", strings.Repeat("a", 64)},
		{"65 bytes (digest)", strings.Repeat("a", 65)},
		{"32 zero bytes", string(make([]byte, 32))},
		{"digest bytes of the 64 KiB key ending a", string(digest[:])},
		{"64 KiB ending a", lastA},
		{"64 KiB ending b", lastB},
		{"64 KiB ending a, plus b", lastA + "b"},
		{"64 KiB starting a", "a" + body},
		{"64 KiB starting b", "b" + body},
		{"64 KiB of NUL", strings.Repeat("\x00", 64<<10)},
		{"64 KiB of 0xFF", strings.Repeat("\xff", 64<<10)},
		{"1 MiB of z", strings.Repeat("z", 1<<20)},
	}
}

// TestHostileKeysBothBackends sends the same table of hostile keys through
// the whole middleware, in memory and on Redis, for every algorithm, and
// shows that each key is its own: it is admitted exactly Max times and then
// rejected, whether the keys are exhausted one after another or
// interleaved, and exhausting any key leaves every other untouched. The key
// reaches the KeyGenerator by the request path's index into the table and
// is handed to the limiter in one buffer that every request overwrites, as
// a key read from a request header would be, so a backend that kept the
// key's bytes without copying them would mix keys up. On Redis it also
// shows that the limiter writes exactly one key per hostile key, named
// KeyPrefix + tag + key byte for byte, and none without a TTL.
func TestHostileKeysBothBackends(t *testing.T) {
	const limit = 3
	keys := hostileKeys()
	seen := map[string]string{}
	for _, k := range keys {
		require.NotContains(t, seen, k.key, "%q repeats %q", k.name, seen[k.key])
		seen[k.key] = k.name
	}
	orders := []struct {
		name string
		// requests returns the table indexes in the order they are sent:
		// limit+1 requests for every key.
		requests func(n int) []int
	}{
		{"one after another", func(n int) []int {
			var seq []int
			for i := range n {
				for range limit + 1 {
					seq = append(seq, i)
				}
			}
			return seq
		}},
		{"interleaved", func(n int) []int {
			var seq []int
			for range limit + 1 {
				for i := range n {
					seq = append(seq, i)
				}
			}
			return seq
		}},
	}
	tags := map[string]string{"FixedWindow": ":fw:1m:", "SlidingWindow": ":sw:1m:", "TokenBucket": ":tb:1m:", "SlidingLog": ":sl:1m:"} // the identity of a limiter without a Name

	// run plays every order through a fresh limiter from newStorage (nil:
	// in memory) for each algorithm, then calls check with the algorithm.
	run := func(t *testing.T, newStorage func(t *testing.T) fiber.Storage, check func(t *testing.T, alg string)) {
		for _, alg := range algorithms {
			for _, order := range orders {
				t.Run(alg.name+"/"+order.name, func(t *testing.T) {
					var buf []byte // the key as the limiter sees it, overwritten per request
					app := newApp(Config{
						Max:               limit,
						Expiration:        time.Minute,
						LimiterMiddleware: alg.mw,
						Storage:           newStorage(t),
						// Long enough that a loaded machine's slow call on a
						// 1 MiB key is still Redis's decision, not the
						// fallback's.
						StorageTimeout: 10 * time.Second,
						KeyGenerator: func(c *fiber.Ctx) string {
							i, err := strconv.Atoi(strings.TrimPrefix(c.Path(), "/"))
							if err != nil || i < 0 || i >= len(keys) {
								t.Errorf("bad path %q", c.Path())
								return "bad path"
							}
							buf = append(buf[:0], keys[i].key...)
							return unsafe.String(unsafe.SliceData(buf), len(buf))
						},
					}, nil, nil)
					sent := make([]int, len(keys))
					admitted := make([]int, len(keys))
					for _, i := range order.requests(len(keys)) {
						n := sent[i]
						sent[i]++
						resp := get(t, app, "/"+strconv.Itoa(i), "")
						if n < limit {
							require.Equal(t, http.StatusOK, resp.StatusCode, "key %s, request %d", keys[i].name, n+1)
							admitted[i]++
						} else {
							require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "key %s, request %d", keys[i].name, n+1)
							assert.NotEmpty(t, resp.Header.Get("Retry-After"), "key %s", keys[i].name)
						}
						assert.Equal(t, strconv.Itoa(limit), resp.Header.Get("X-RateLimit-Limit"), "key %s", keys[i].name)
						assert.Equal(t, strconv.Itoa(max(0, limit-1-n)), resp.Header.Get("X-RateLimit-Remaining"),
							"key %s, request %d", keys[i].name, n+1)
					}
					// Every key has been exhausted, all others after it
					// too: each must still be spent, having been admitted
					// exactly limit times.
					for i, k := range keys {
						assert.Equal(t, limit, admitted[i], "key %s", k.name)
						resp := get(t, app, "/"+strconv.Itoa(i), "")
						assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "key %s after all keys were exhausted", k.name)
					}
					if check != nil {
						check(t, alg.name)
					}
				})
			}
		}
	}

	t.Run("memory", func(t *testing.T) {
		run(t, func(*testing.T) fiber.Storage { return nil }, nil)
	})

	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		client := srv.Client(t)
		ctx := context.Background()
		maxTTL := map[string]time.Duration{"FixedWindow": time.Minute, "SlidingWindow": 2 * time.Minute, "TokenBucket": time.Minute, "SlidingLog": time.Minute}
		newStorage := func(t *testing.T) fiber.Storage {
			require.NoError(t, client.FlushDB(ctx).Err()) // each subtest starts from an empty database
			return redis.New(srv.Client(t))
		}
		run(t, newStorage, func(t *testing.T, alg string) {
			want := map[string]string{} // Redis key name -> hostile key name
			for _, k := range keys {
				want[ConfigDefault.KeyPrefix+tags[alg]+k.key] = k.name
			}
			found := map[string]bool{}
			iter := client.Scan(ctx, 0, "", 100).Iterator()
			for iter.Next(ctx) {
				name := iter.Val()
				hostile, ok := want[name]
				if !assert.True(t, ok, "unexpected Redis key %.80q (%d bytes)", name, len(name)) {
					continue
				}
				found[name] = true
				ttl, err := client.PTTL(ctx, name).Result()
				require.NoError(t, err)
				assert.Greater(t, ttl, time.Duration(0), "Redis key of %s has no TTL (PTTL %v)", hostile, ttl)
				assert.LessOrEqual(t, ttl, maxTTL[alg], "Redis key of %s", hostile)
			}
			require.NoError(t, iter.Err())
			for name, hostile := range want {
				assert.True(t, found[name], "no Redis key named prefix+tag+key for %s", hostile)
			}
			// KEYS, not DBSIZE, which counts New's probe key, a ms long,
			// until Redis gets round to dropping it.
			assert.Len(t, storedKeys(t, client, "*"), len(keys), "one Redis key per hostile key, nothing else")
		})
	})
}
