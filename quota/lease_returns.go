package quota

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// leaseReturns gives back what shares did not use, when their leases end,
// by a timer of the limiter's rather than at the key's next take: a
// replica that goes quiet strands nothing. One timer serves every share,
// set for the earliest end; it runs on a goroutine only while it has
// returns to make.
//
// A return is the refund of the share's take, so it credits only what
// the store still counts of it (a token bucket's shares give nothing
// back: errLeasedBucketRefund). One that fails where the store surely did
// not apply it (the breaker open, a connection refused) is tried again,
// up to leaseReturnTries times in all, after 100, 200, 400 and 800 ms; one
// that may have been applied (a timeout) is not, so that none is applied
// twice. Units not given back stay counted until their window ends, as a
// crashed replica's would.
//
// A tracked key has one end in the queue (leaseEntry.queuedAt), or two
// when a share must end before the one queued: a share granted while an
// end is queued is ended by it, or queued again by it for its own end.
type leaseReturns struct {
	store   *leasedStore
	mu      sync.Mutex
	queue   leaseQueue
	timer   *time.Timer
	armed   int64 // when the timer fires (ms), 0 when it is not set
	running bool  // a goroutine is making returns
}

// leaseReturn is the unused part of a share, to give back.
type leaseReturn struct {
	key       string
	units     int64
	n         int
	countedIn [maxLimits]int64 // where the share's take counted its units, by limit
	tries     int
}

// leaseDue is the end of the lease of key's share, at at, or a return to
// make at at (back).
type leaseDue struct {
	at   int64
	key  string
	back *leaseReturn
}

// Bounds of the returns: how often a return is tried, the wait before
// trying again (doubling), and how many ends and returns wait at once
// (past it, a share goes back at its key's next take, or, a return, not
// at all: its units stay counted until their window ends).
const (
	leaseReturnTries = 5
	leaseRetryWait   = 50 // ms, doubled before the first retry
	leaseQueueMost   = 4 * leaseKeysMost
	// leaseReturners is how many returns are made at once.
	leaseReturners = 16
)

// due sets the end of key's share at at, and reports whether it could
// (false when the queue is full: the share ends at its key's next take).
func (q *leaseReturns) due(key string, at int64) bool {
	return q.push(leaseDue{at: at, key: key})
}

// add gives back back at now.
func (q *leaseReturns) add(back *leaseReturn, now int64) {
	q.push(leaseDue{at: now, key: back.key, back: back})
}

func (q *leaseReturns) push(d leaseDue) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) >= leaseQueueMost {
		return false
	}
	heap.Push(&q.queue, d)
	if !q.running {
		q.arm(q.store.guard.now())
	}
	return true
}

// arm sets the timer for the earliest entry of the queue. q.mu is held.
func (q *leaseReturns) arm(now int64) {
	if len(q.queue) == 0 {
		return
	}
	at := q.queue[0].at
	if q.armed != 0 && q.armed <= at {
		return
	}
	q.armed = at
	wait := time.Duration(max(0, at-now)) * time.Millisecond
	if q.timer == nil {
		q.timer = time.AfterFunc(wait, q.fire)
		return
	}
	q.timer.Reset(wait)
}

// fire makes every return that is due, and sets the timer for the next.
// Once the limiter is gone, it ends every lease at once (nobody spends
// from them) and makes the returns, so that no timer outlives them.
func (q *leaseReturns) fire() {
	q.mu.Lock()
	q.armed = 0
	if q.running {
		q.mu.Unlock()
		return
	}
	q.running = true
	for {
		now := q.store.guard.now()
		gone := q.store.guard.life.Err() != nil
		var batch []leaseDue
		for len(q.queue) > 0 && (gone || q.queue[0].at <= now) {
			batch = append(batch, heap.Pop(&q.queue).(leaseDue))
		}
		if len(batch) == 0 {
			q.running = false
			q.arm(now)
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		q.store.endAll(batch, now, gone)
		q.mu.Lock()
	}
}

// endAll ends batch, leaseReturners at a time: each return is a call to
// the store, and a replica with thousands of busy keys makes thousands
// a lease.
func (s *leasedStore) endAll(batch []leaseDue, now int64, gone bool) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(batch), leaseReturners) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(batch)); i = next.Add(1) - 1 {
				s.end(batch[i], now, gone)
			}
		})
	}
	wg.Wait()
}

// end makes the return d, or ends the lease of d's key when it is due (or
// the limiter is gone) and gives back what it did not use; a lease that
// runs on (a later share's) is queued again for its end.
func (s *leasedStore) end(d leaseDue, now int64, gone bool) {
	back := d.back
	if back == nil {
		sh := s.shard(d.key)
		sh.mu.Lock()
		if e := sh.keys[d.key]; e != nil {
			e.queuedAt = 0
			if out := e.share; out != nil && out.id != 0 {
				if now < out.ends && !gone {
					if s.returns.due(e.key, out.ends) {
						e.queuedAt = out.ends
					}
				} else {
					back = e.detach(s)
				}
			}
		}
		sh.mu.Unlock()
	}
	if back != nil {
		s.giveBack(back) // once the limiter is gone, without retries
	}
}

// giveBack refunds back's units to the store, and tries again later when
// the store surely did not take them.
func (s *leasedStore) giveBack(back *leaseReturn) {
	credit := Result{n: back.n, adjust: refundTaken}
	for i := range back.n {
		credit.each[i].Allowed = true
		credit.each[i].countedIn = back.countedIn[i]
	}
	_, err := s.guard.adjustKey(context.Background(), back.key, s.base, back.units, credit)
	if err == nil || back.tries+1 >= leaseReturnTries || s.guard.life.Err() != nil {
		return
	}
	if errors.Is(err, errBreakerOpen) || s.guard.store.classify(err) == failureNotRun {
		back.tries++
		q := &s.returns
		q.push(leaseDue{at: s.guard.now() + leaseRetryWait<<back.tries, key: back.key, back: back})
	}
}

// leaseQueue is a heap of leaseDue by at.
type leaseQueue []leaseDue

func (h leaseQueue) Len() int           { return len(h) }
func (h leaseQueue) Less(i, j int) bool { return h[i].at < h[j].at }
func (h leaseQueue) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *leaseQueue) Push(x any)        { *h = append(*h, x.(leaseDue)) }
func (h *leaseQueue) Pop() any {
	old := *h
	d := old[len(old)-1]
	*h = old[:len(old)-1]
	return d
}
