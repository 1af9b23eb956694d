package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/redis/go-redis/v9"
)

// The concurrency slots of quota.Concurrency: a sorted set per limited
// key, taken by slots.lua and released by ZREM, each one round trip
// outside the pipelines (a slot is held for a request's whole length, so
// a batch would save little).

//go:embed slots.lua
var slotsLua string

// slotsScript is AcquireSlot's script.
var slotsScript = redis.NewScript(slotsLua)

var _ redisengine.SlotEngine = (*engine)(nil)

// maxSlotTTL is the longest expiry of a slot, in ms (about 35,000 years):
// a score and a PEXPIRE that Redis keeps exact.
const maxSlotTTL = 1 << 50

// AcquireSlot takes a slot of key for id, unless max are taken; see
// redisengine.SlotEngine. ttl is rounded up to whole ms.
func (e *engine) AcquireSlot(ctx context.Context, key, id string, max int64, ttl time.Duration) (bool, int64, error) {
	if max < 1 {
		return false, 0, fmt.Errorf("limiter: redis acquire slot: max %d; it must be at least 1", max)
	}
	if ttl <= 0 {
		return false, 0, fmt.Errorf("limiter: redis acquire slot: expiry %v; it must be above 0", ttl)
	}
	ms := min(int64((ttl+time.Millisecond-1)/time.Millisecond), maxSlotTTL)
	now := ""
	if e.clock != nil {
		now = strconv.FormatInt(e.clock().UnixMilli(), 10)
	}
	mark := e.attempts.mark()
	res, err := slotsScript.Run(ctx, e.calls, []string{key}, id, max, ms, now).Int64Slice()
	if err != nil {
		return false, 0, e.slotError("acquire slot", mark, err)
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("limiter: redis acquire slot: answer %v; want 2 integers", res)
	}
	return res[0] == 1, res[1], nil
}

// ReleaseSlot frees id's slot of key; see redisengine.SlotEngine.
func (e *engine) ReleaseSlot(ctx context.Context, key, id string) error {
	mark := e.attempts.mark()
	if err := e.calls.ZRem(ctx, key, id).Err(); err != nil {
		return e.slotError("release slot", mark, err)
	}
	return nil
}

// slotError wraps err of a slot call begun at mark as run does: the key
// left out, and what made the call miss its deadline named.
func (e *engine) slotError(op string, mark uint64, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		if cause := e.attempts.since(mark); cause != nil {
			return fmt.Errorf("limiter: redis %s: %w, until the call's deadline passed (%w)", op, cause, err)
		}
	}
	return fmt.Errorf("limiter: redis %s: %w", op, err)
}
