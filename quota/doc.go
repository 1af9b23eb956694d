// Package quota is the rate-limiting engine of this module, usable from any
// Go program: it takes and refunds a cost for a key under one or more
// limits, and knows nothing of HTTP frameworks. The Fiber v2 and v3 and
// net/http middlewares of this module are thin adapters over it.
//
// A Limit is Max units of cost per Expiration. A Limiter decides each take
// under its limits with one of four algorithms:
//
//   - FixedWindow: at most Max units in a window of Expiration that starts
//     at a key's first counted take;
//   - SlidingWindow: the previous window's count, weighted by how much of
//     it still overlaps, plus the current one's, stays within Max;
//   - TokenBucket: a bucket of Burst tokens (default Max) refilled at Max
//     per Expiration; a take of cost n takes n tokens;
//   - SlidingLog: the time of every unit counted in the last Expiration is
//     kept, and they, with the take's cost, stay within Max: exact over any
//     window, for Max up to 10,000.
//
// A take that is rejected counts nothing, and several limits (10 a second
// and 1000 an hour) are decided as one: a take that one rejects counts
// under none. Time is kept in milliseconds; a Result says whether the take
// was admitted, what is left, and when to retry.
//
// State lives in this process by default (bounded by MaxKeys, with no
// goroutine of its own). With Config.Redis, every take is one atomic Lua
// script call, with Redis's own clock, so that any number of processes
// sharing the Redis (a plain, Sentinel, Cluster or Ring client) admit
// exactly the limit between them. Redis calls have a timeout and a breaker;
// while Redis fails, FailurePolicy decides: in memory per process
// (FailFallback, the default), admit (FailOpen) or reject (FailClosed).
//
// Operators see a key's state without counting (Peek), forget its counts
// (Reset) and hold it off for a while whatever its counts (Block); on
// Redis each holds on every process within a second.
//
//	limiter, err := quota.New(quota.Config{
//		Limits: []quota.Limit{quota.PerSecond(10), quota.PerHour(1000)},
//		Redis:  client,
//	})
//	...
//	res, err := limiter.Take(ctx, "user:42", 1)
//	if !res.Allowed() {
//		// retry after res.RetryAfter()
//	}
package quota
