package redis

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// batcher coalesces the script calls that callers make at the same time
// into pipelines: one write and one read on a connection for all of them,
// instead of a round trip each. There is no timer and no added wait: a
// call that finds fewer than maxInFlight pipelines in flight sends itself,
// with whatever calls are waiting, at once on its own goroutine; a call
// that finds them all busy waits, and the next pipeline to finish hands
// the waiting calls to a goroutine that sends them together. On Redis
// Cluster, go-redis splits a pipeline by node.
type batcher struct {
	client      redis.UniversalClient
	maxInFlight int

	mu       sync.Mutex
	queue    []*batchedCall
	inFlight int // pipelines being sent

	pipelines atomic.Int64 // pipelines sent
	calls     atomic.Int64 // calls sent in them
}

func newBatcher(client redis.UniversalClient) *batcher {
	return &batcher{client: client, maxInFlight: 4 * runtime.GOMAXPROCS(0)}
}

// batchedCall is one script call waiting in a batcher.
type batchedCall struct {
	ctx  context.Context // the caller's: a call whose caller has left is not sent
	alg  Algorithm
	key  string
	arg  string
	cmd  *redis.StringCmd
	done chan struct{} // closed when cmd has its answer; nil for the call that sends it
}

// run makes the script call of alg for key with arg, in a pipeline, and
// waits for its answer or for ctx to end.
func (b *batcher) run(ctx context.Context, alg Algorithm, key string, arg []byte) (string, error) {
	c := &batchedCall{ctx: ctx, alg: alg, key: key, arg: string(arg)}
	b.mu.Lock()
	if b.inFlight < b.maxInFlight {
		b.inFlight++
		batch := append(b.queue, c)
		b.queue = nil
		b.mu.Unlock()
		b.send(ctx, batch)
		return c.cmd.Result()
	}
	c.done = make(chan struct{})
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd.Result()
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// send sends batch as one pipeline under ctx, then hands the calls that
// queued meanwhile to a goroutine of their own, or ends.
func (b *batcher) send(ctx context.Context, batch []*batchedCall) {
	b.exec(ctx, batch)
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inFlight--
		b.mu.Unlock()
		return
	}
	next := b.queue
	b.queue = nil
	b.mu.Unlock()
	// The caller that sent batch has its answer: the next pipeline goes on
	// a goroutine, without the caller's deadline, so that the caller need
	// not wait for calls that are not its own.
	go b.send(context.Background(), next)
}

// exec sends batch as one pipeline of EVALSHA under ctx, and the calls that
// found their script missing (after a restart or SCRIPT FLUSH) as one
// pipeline of EVAL, then wakes every caller. Callers also wait for their
// own contexts; a client that ignores ctx's deadline is bounded by its
// ReadTimeout.
func (b *batcher) exec(ctx context.Context, batch []*batchedCall) {
	defer func() {
		// A panic (in a go-redis hook, say) fails the calls, not the process.
		if p := recover(); p != nil {
			err := fmt.Errorf("limiter: redis pipeline panicked: %v", p)
			for _, c := range batch {
				if c.cmd == nil {
					c.cmd = redis.NewStringCmd(ctx)
				}
				if c.cmd.Err() == nil && c.cmd.Val() == "" {
					c.cmd.SetErr(err)
				}
			}
		}
		for _, c := range batch {
			if c.done != nil {
				close(c.done)
			}
		}
	}()
	if len(batch) == 1 && batch[0].ctx.Err() == nil { // alone: a plain call costs less than a pipeline of one
		c := batch[0]
		b.pipelines.Add(1)
		b.calls.Add(1)
		c.cmd = scriptCmd(ctx, "evalsha", scripts[c.alg].Hash(), c.key, c.arg)
		_ = b.client.Process(ctx, c.cmd)
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			c.cmd = scriptCmd(ctx, "eval", scriptSources[c.alg], c.key, c.arg)
			_ = b.client.Process(ctx, c.cmd)
		}
		return
	}
	pipe := b.client.Pipeline()
	sent := 0
	for _, c := range batch {
		if c.ctx.Err() != nil {
			c.cmd = redis.NewStringCmd(c.ctx)
			c.cmd.SetErr(c.ctx.Err())
			continue
		}
		c.cmd = scriptCmd(ctx, "evalsha", scripts[c.alg].Hash(), c.key, c.arg)
		_ = pipe.Process(ctx, c.cmd)
		sent++
	}
	if sent > 0 {
		execErr(pipe.Exec(ctx))
		b.pipelines.Add(1)
		b.calls.Add(int64(sent))
		var missing []*batchedCall
		for _, c := range batch {
			if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			pipe := b.client.Pipeline()
			for _, c := range missing {
				c.cmd = scriptCmd(ctx, "eval", scriptSources[c.alg], c.key, c.arg)
				_ = pipe.Process(ctx, c.cmd)
			}
			execErr(pipe.Exec(ctx))
		}
	}
}

// execErr gives err, the error of a pipeline's Exec, to each of its
// commands that got neither a reply nor an error: go-redis v9 leaves them so
// when it gives up on a connection after its retries.
func execErr(cmds []redis.Cmder, err error) {
	if err == nil {
		return
	}
	for _, cmd := range cmds {
		if c, ok := cmd.(*redis.StringCmd); ok && c.Err() == nil && c.Val() == "" {
			c.SetErr(err)
		}
	}
}

// PipelineStats reports how many writes the Store has sent (pipelines, a
// call sent alone counting as a pipeline of one) and how many script calls
// they carried, since it was made: calls/pipelines is how many calls shared
// a write on average. Both are 0 WithoutPipelining.
func (s *Store) PipelineStats() (pipelines, calls int64) {
	if s.batch == nil {
		return 0, 0
	}
	return s.batch.pipelines.Load(), s.batch.calls.Load()
}
