package redis

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// withDeadlines returns the client a Store makes its script calls
// through. A plain Client (also one of a Sentinel failover) made without
// ContextTimeoutEnabled returns from a call only after its ReadTimeout (3 s
// by default), however soon the call's deadline comes: such a client is
// used through a copy of it made by Client.WithTimeout, which shares its
// connections (and its dial hooks, which go with them), with two settings
// of its own: ContextTimeoutEnabled, and a Limiter that remembers why the
// latest attempt failed (see attempts), passing every call on to the
// client's own Limiter, if any. go-redis does not copy a client's other
// hooks to such a copy: the script calls do not reach them. Any other
// client is used as it is.
func withDeadlines(client redis.UniversalClient) (redis.UniversalClient, *attempts) {
	c, ok := client.(*redis.Client)
	if !ok || c.Options().ContextTimeoutEnabled {
		return client, nil
	}
	// go-redis sets no deadline at all for a negative timeout (it has
	// made the -2 given to NewClient -1), not even the context's; 0 on
	// the copy leaves the context's deadline alone.
	timeout := max(0, c.Options().ReadTimeout)
	clone := c.WithTimeout(timeout)
	// WithTimeout gave the copy options of its own: setting them leaves
	// the client given to New as it was.
	opts := clone.Options()
	rec := &attempts{next: opts.Limiter}
	opts.Limiter = rec
	opts.ContextTimeoutEnabled = true
	return clone, rec
}

// attempts is a go-redis Limiter that lets every call through and
// remembers the latest error of an attempt: go-redis retries a call whose
// dial or connection failed until its retries or the call's deadline run
// out, and a call that the deadline ends then returns only the context's
// error, where what failed (a refused dial, a reset connection, a refused
// password) is what its caller needs to know.
type attempts struct {
	next   redis.Limiter // the client's own, or nil
	failed atomic.Uint64 // attempts that failed so far
	last   atomic.Pointer[error]
}

// Allow asks the client's own Limiter, if any.
func (a *attempts) Allow() error {
	if a.next != nil {
		return a.next.Allow()
	}
	return nil
}

// ReportResult remembers a failed attempt's error, if go-redis may retry
// it, and tells the client's own Limiter, if any.
func (a *attempts) ReportResult(err error) {
	if a.next != nil {
		a.next.ReportResult(err)
	}
	if err == nil || !retried(err) {
		return
	}
	a.last.Store(&err)
	a.failed.Add(1)
}

// retried tells whether err is one that go-redis retries a call after: a
// failure of the connection, or an error reply of a server that cannot
// serve now. Other replies (a script's error, or those to the optional
// commands go-redis sends as it sets a connection up) come back to the
// caller as they are, or are no failure at all.
func retried(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true
	}
	for _, prefix := range [...]string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "ERR max number of clients"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// mark returns what since needs to tell the failures after it.
func (a *attempts) mark() uint64 {
	if a == nil {
		return 0
	}
	return a.failed.Load()
}

// since returns the latest error of an attempt that failed after mark,
// or nil.
func (a *attempts) since(mark uint64) error {
	if a == nil || a.failed.Load() == mark {
		return nil
	}
	if err := a.last.Load(); err != nil {
		return *err
	}
	return nil
}
