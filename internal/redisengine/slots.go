package redisengine

import (
	"context"
	"time"
)

// SlotEngine holds concurrency slots in Redis: at most max members of a
// key's sorted set, each a request in flight until it is released or its
// expiry passes (quota.Concurrency). The engine that Open returns
// implements it. Each method is one round trip, not batched with other
// calls. Errors begin with "limiter: redis" and leave the key out.
type SlotEngine interface {
	// AcquireSlot takes a slot of key for the request id, unless max are
	// taken: it first forgets the slots whose expiry has passed, then, with
	// room, adds id with an expiry ttl from now (Redis's clock, TIME) and
	// keeps the key until the latest expiry. It returns whether id got a
	// slot and how many of key's slots are taken after the call. A key that
	// holds another type is an error (WRONGTYPE) for that key alone, and
	// is given a TTL of at most ttl, so that it does not hold the key off
	// for good.
	AcquireSlot(ctx context.Context, key, id string, max int64, ttl time.Duration) (acquired bool, taken int64, err error)

	// ReleaseSlot frees id's slot of key: a slot that has expired, or was
	// released before, or another request's, is left as it is.
	ReleaseSlot(ctx context.Context, key, id string) error
}
