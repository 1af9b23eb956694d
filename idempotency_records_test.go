package limiter

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// A client that chooses its key (an API key, a username) cannot forge an
// idempotency record: it makes requests under keys named like the records
// of its own spent key's ids, under the names records had before (the
// limiter's prefix + "once2:") and have now (see quota's recordsOf), so
// that the states the limiter keeps there are values of every length a
// few hits give; and then sends those ids for the spent key. Three
// replicas, each with its own client, every algorithm: the spent key is
// admitted exactly Max times, plus the repeats of the one id it was
// legitimately admitted under.
func TestIdempotencyRecordsCannotBeForged(t *testing.T) {
	server := redistest.Start(t)
	tags := map[string]string{"FixedWindow": "fw", "SlidingWindow": "sw", "TokenBucket": "tb", "SlidingLog": "sl"}
	const max, victim = 10, "victim"
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			name := "forge-" + alg.name
			var replicas []fasthttp.RequestHandler
			for range 3 {
				client := goredis.NewClient(&goredis.Options{Addr: server.Addr()})
				t.Cleanup(func() { _ = client.Close() })
				replicas = append(replicas, replicaHandler(strict(Config{
					Max: max, Expiration: time.Hour, LimiterMiddleware: alg.mw, Name: name,
					Storage: redis.New(client), IdempotencyKey: IdempotencyKeyHeader,
				})))
			}
			admitted := 0
			send := func(i int, key, id string) {
				var ctx fasthttp.RequestCtx
				ctx.Request.Header.SetMethod(fasthttp.MethodGet)
				ctx.Request.SetRequestURI("/")
				ctx.Request.Header.Set("X-Key", key)
				if id != "" {
					ctx.Request.Header.Set("Idempotency-Key", id)
				}
				replicas[i%3](&ctx)
				switch code := ctx.Response.StatusCode(); {
				case code == fiber.StatusOK && key == victim:
					admitted++
				case code != fiber.StatusOK && code != fiber.StatusTooManyRequests:
					t.Fatalf("status %d", code)
				}
			}
			// The victim's quota: 9 plain requests, then one under an id,
			// whose repeats are legitimate; then it is spent.
			for i := range max - 1 {
				send(i, victim, "")
			}
			send(0, victim, "legit")
			for i := range 20 {
				send(i, victim, "")
			}
			require.Equal(t, max, admitted)

			// The values: a key of the limiter's is hit 1 to 10 times.
			prefix := "limiter:" + name + ":" + tags[alg.name] + ":1h:"
			var ids []string
			for hits := 1; hits <= max; hits++ {
				for j := range 3 {
					id := "forged-" + strconv.Itoa(hits) + "-" + strconv.Itoa(j)
					ids = append(ids, id)
					record := forgeRecordName(victim, id)
					old := forgeRecordKey(prefix+victim, prefix+"once2:"+record)
					now := forgeRecordKey(prefix+victim, strings.TrimSuffix(prefix, ":")+"!once3:"+record)
					for _, key := range []string{
						old[len(prefix):],   // the old record's name
						now,                 // the record's name, after the prefix
						now[len(prefix)-1:], // its "!" and what follows
						now[len(prefix):],   // what follows its "!"
					} {
						for i := range hits {
							send(i, key, "")
						}
					}
				}
			}
			for _, id := range append(ids, "legit") {
				for i := range 9 {
					send(i, victim, id)
				}
			}
			assert.Equal(t, max+8, admitted, "Max, and the 8 repeats of the legitimate id")
		})
	}
}

// forgeRecordName is the name quota gives the record of request id of
// key: a digest of both, its first 16 bytes in hex.
func forgeRecordName(key, id string) string {
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(key))))
	h.Write([]byte(key))
	h.Write([]byte(id))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// forgeRecordKey is where the Redis store keeps record for key: in key's
// hash slot, by a hash tag added at its end when it is not there already.
func forgeRecordKey(key, record string) string {
	slot := forgeHashSlot(key)
	if forgeHashSlot(record) == slot {
		return record
	}
	for n := 0; ; n++ {
		if tag := "{" + strconv.Itoa(n) + "}"; forgeHashSlot(tag) == slot {
			return record + tag
		}
	}
}

// forgeHashSlot is key's Redis Cluster hash slot.
func forgeHashSlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := range len(key) {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
