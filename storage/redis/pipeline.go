package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/redis/go-redis/v9"
)

// batcher coalesces the script calls that callers make at the same time
// into pipelines: one write and one read on a connection for many, instead
// of a round trip each. There is no timer and no added wait: a call that
// finds fewer than maxInFlight sends in flight goes out at once, alone, on
// its own goroutine; a call that finds them all busy queues, and the next
// send to finish hands the queued calls to a goroutine that sends them as
// one pipeline.
type batcher struct {
	client      redis.UniversalClient // the node's, or the one client of a single node
	bySlot      bool                  // a node of a Cluster or Ring: batch scripts hold one slot's calls
	batches     bool                  // calls of one algorithm and slot go as one batch script call
	maxInFlight int
	stats       *pipelineStats

	mu       sync.Mutex
	queue    []*batchedCall
	inFlight int // pipelines being sent
}

// pipelineStats counts what a Store's batchers send.
type pipelineStats struct {
	pipelines atomic.Int64 // writes: pipelines, and calls sent alone
	calls     atomic.Int64 // calls sent in them
	scripts   atomic.Int64 // script calls that carried them
}

func newBatcher(client redis.UniversalClient, stats *pipelineStats, bySlot bool) *batcher {
	return &batcher{client: client, bySlot: bySlot, batches: true, maxInFlight: max(4, 2*runtime.GOMAXPROCS(0)), stats: stats}
}

// pipelines sends each call through the batcher of the Redis node that
// holds its key: one batcher for a single node (a Client, a failover
// Client), one per master of a ClusterClient and per shard of a Ring, so
// that a pipeline goes to one node and a slow node holds up only its own
// keys.
type pipelines struct {
	client redis.UniversalClient
	// node returns the client of the node that holds key; nil when there
	// is only one.
	node    func(ctx context.Context, key string) (*redis.Client, error)
	one     *batcher
	nodes   sync.Map // node address → *batcher, of the node's current client
	stats   pipelineStats
	batches bool // see WithoutBatching
}

func newPipelines(client redis.UniversalClient, batches bool) *pipelines {
	p := &pipelines{client: client, batches: batches}
	switch c := client.(type) {
	case *redis.ClusterClient:
		p.node = c.MasterForKey
	case *redis.Ring:
		p.node = func(_ context.Context, key string) (*redis.Client, error) { return c.GetShardClientForKey(key) }
	default:
		p.one = newBatcher(client, &p.stats, false)
		p.one.batches = batches
	}
	return p
}

// run makes the script call of alg for key with arg through the batcher of
// key's node. When the node is not known (the cluster's slots are not
// loaded, say) or has moved the key's slot elsewhere (MOVED, ASK: nothing
// ran), the call goes alone through the cluster or ring client, which
// finds the node itself.
func (p *pipelines) run(ctx context.Context, alg redisengine.Algorithm, key string, arg []byte) (string, error) {
	if p.node == nil {
		return p.one.run(ctx, alg, key, arg)
	}
	node, err := p.node(ctx, key)
	if err != nil || node == nil {
		return runScript(ctx, p.client, alg, key, string(arg)).Result()
	}
	res, err := p.batcherFor(node).run(ctx, alg, key, arg)
	if err != nil && notRun(err) {
		return runScript(ctx, p.client, alg, key, string(arg)).Result()
	}
	return res, err
}

// batcherFor returns the batcher of node, one per address: a node whose
// client the cluster or ring has replaced (after a topology change) gets a
// new batcher in place of the old one, so the map holds one per address.
func (p *pipelines) batcherFor(node *redis.Client) *batcher {
	addr := node.Options().Addr
	if b, ok := p.nodes.Load(addr); ok && b.(*batcher).client == node {
		return b.(*batcher)
	}
	b := newBatcher(node, &p.stats, true)
	b.batches = p.batches
	p.nodes.Store(addr, b)
	return b
}

// notRun tells whether err, from a call sent to a node's own client, says
// the script did not run there, so that the call may go again through the
// cluster or ring client, which follows redirections and retries as it is
// configured to: the node no longer serves the key's slot (MOVED, ASK),
// the cluster or node cannot take writes now (CLUSTERDOWN, TRYAGAIN,
// LOADING, MASTERDOWN, READONLY), or the call never left (the node's
// client is closed, its pool timed out, or the dial failed).
func notRun(err error) bool {
	for _, prefix := range [...]string{"MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN", "LOADING", "MASTERDOWN", "READONLY"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	var op *net.OpError
	return errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.As(err, &op) && op.Op == "dial"
}

// batchedCall is one script call waiting in a batcher.
type batchedCall struct {
	ctx  context.Context // the caller's: a call whose caller has left is not sent
	alg  redisengine.Algorithm
	key  string
	arg  string
	cmd  *redis.StringCmd
	done chan struct{} // closed when cmd has its answer; nil for the call that sends it
	// woken is set, by the goroutine sending the call only, once done is
	// closed.
	woken bool
	// endPipeline ends the context of the pipeline that carries the call,
	// once one does (see batchContext); the caller calls it when it gives
	// up waiting.
	endPipeline atomic.Pointer[context.CancelFunc]
}

// giveUp is what a caller that stops waiting for c does: it ends the
// pipeline c is in, if any, so that go-redis sends that pipeline no more.
func (c *batchedCall) giveUp() {
	if end := c.endPipeline.Load(); end != nil {
		(*end)()
	}
}

// wake tells c's caller that c.cmd has its answer, once.
func (c *batchedCall) wake() {
	if c.done != nil && !c.woken {
		c.woken = true
		close(c.done)
	}
}

// result is c's answer. A call that another caller's giving up cut off
// (see batchContext) while its own caller still waits gets errCutOff, not
// the pipeline's context.Canceled: Redis may have run it, as a call that
// timed out, and the store did not fail.
func (c *batchedCall) result() (string, error) {
	s, err := c.cmd.Result()
	if err != nil && errors.Is(err, context.Canceled) && c.ctx.Err() == nil {
		err = fmt.Errorf("%w (%w)", errCutOff, err)
	}
	return s, err
}

// errCutOff is the error of a call whose pipeline ended because another
// call's caller gave up. It wraps context.DeadlineExceeded, so that the
// limiter reads it as a call that ran late (Redis may have counted it),
// not as a store out of reach.
var errCutOff = fmt.Errorf("limiter: redis: the pipeline carrying this call ended when another caller stopped waiting; Redis may have run it: %w", context.DeadlineExceeded)

// leave gives c the error of its caller's context, which has ended: c is
// not sent.
func (c *batchedCall) leave() {
	c.cmd = redis.NewStringCmd(c.ctx)
	c.cmd.SetErr(c.ctx.Err())
}

// run makes the script call of alg for key with arg, and waits for its
// answer or for ctx to end.
func (b *batcher) run(ctx context.Context, alg redisengine.Algorithm, key string, arg []byte) (string, error) {
	c := &batchedCall{ctx: ctx, alg: alg, key: key, arg: string(arg)}
	b.mu.Lock()
	if b.inFlight < b.maxInFlight { // then nothing is queued either
		b.inFlight++
		b.mu.Unlock()
		b.send(ctx, []*batchedCall{c})
		return c.result()
	}
	c.done = make(chan struct{})
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.result()
	case <-ctx.Done():
		c.giveUp()
		return "", ctx.Err()
	}
}

// send sends batch under ctx, then hands the calls that queued meanwhile
// to a goroutine of its own, or gives its place back.
func (b *batcher) send(ctx context.Context, batch []*batchedCall) {
	defer func() {
		b.mu.Lock()
		next := b.queue
		b.queue = nil
		if len(next) == 0 {
			b.inFlight--
		}
		b.mu.Unlock()
		if len(next) > 0 {
			// The caller that sent batch has its answer: the next pipeline
			// goes on a goroutine, under its own calls' context.
			go func() {
				ctx, cancel := batchContext(next)
				defer cancel()
				b.send(ctx, next)
			}()
		}
	}()
	b.exec(ctx, batch)
}

// batchContext is the context a pipeline of calls is sent under, made from
// the calls whose callers still wait: the values of the first one's
// context, and as its deadline the latest of theirs (none if one has none),
// so that a client that reads under its context's deadline waits for the
// answers as long as some caller does. Each call is given its cancel
// function, which its caller calls when it gives up (its deadline passes
// or its context is cancelled): go-redis sends a pipeline again after a
// read timeout and some error replies, and waits for a pool connection,
// only while its context lasts, so a call is never sent again once its
// caller has gone, as without pipelining; the other calls of that pipeline
// then fail with the context's error. A call is given the function before
// exec checks, when it sends, whether its caller is still there: a caller
// that leaves later finds the function.
func batchContext(calls []*batchedCall) (context.Context, context.CancelFunc) {
	var first *batchedCall
	var latest time.Time
	unbounded := false
	for _, c := range calls {
		if c.ctx.Err() != nil {
			continue
		}
		if first == nil {
			first = c
		}
		if d, ok := c.ctx.Deadline(); !ok {
			unbounded = true
		} else if d.After(latest) {
			latest = d
		}
	}
	if first == nil {
		first = calls[0]
	}
	base := context.WithoutCancel(first.ctx)
	var ctx context.Context
	var cancel context.CancelFunc
	if unbounded || latest.IsZero() {
		ctx, cancel = context.WithCancel(base)
	} else {
		ctx, cancel = context.WithDeadline(base, latest)
	}
	for _, c := range calls {
		c.endPipeline.Store(&cancel)
	}
	return ctx, cancel
}

// exec sends batch as one pipeline of EVALSHA under ctx, wakes the callers
// answered, then sends the calls that found their script missing (after a
// restart or SCRIPT FLUSH) and whose callers still wait as one pipeline of
// EVAL, and wakes the rest. Callers also wait for their own contexts; a
// client that ignores ctx's deadline is bounded by its ReadTimeout.
func (b *batcher) exec(ctx context.Context, batch []*batchedCall) {
	defer func() {
		// A panic (in a go-redis hook, say) fails the calls, not the process.
		if p := recover(); p != nil {
			err := fmt.Errorf("limiter: redis pipeline panicked: %v", p)
			for _, c := range batch {
				if c.woken {
					continue
				}
				if c.cmd == nil {
					c.cmd = redis.NewStringCmd(ctx)
				}
				if c.cmd.Err() == nil && c.cmd.Val() == "" {
					c.cmd.SetErr(err)
				}
			}
		}
		for _, c := range batch {
			c.wake()
		}
	}()
	if len(batch) == 1 && batch[0].ctx.Err() == nil { // alone: a plain call costs less than a pipeline of one
		c := batch[0]
		b.stats.pipelines.Add(1)
		b.stats.calls.Add(1)
		b.stats.scripts.Add(1)
		c.cmd = runScript(ctx, b.client, c.alg, c.key, c.arg)
		return
	}
	pipe := b.client.Pipeline()
	// A PING goes first. go-redis sends a whole pipeline again when its
	// first reply is an error it retries (LOADING, READONLY, CLUSTERDOWN,
	// TRYAGAIN, ...), which would run the other calls, already answered,
	// once more: a PING is answered in every one of those states.
	pipe.Ping(ctx)
	var live []*batchedCall
	for _, c := range batch {
		if c.ctx.Err() != nil {
			c.leave()
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	groups := groupCalls(live, b.bySlot, b.batches)
	for _, g := range groups {
		g.queue(ctx, pipe, "evalsha")
	}
	execErr(pipe.Exec(ctx))
	b.stats.pipelines.Add(1)
	b.stats.calls.Add(int64(len(live)))
	b.stats.scripts.Add(int64(len(groups)))
	var missing []*batchedCall
	for _, g := range groups {
		g.answer(ctx)
		for _, c := range g.calls {
			if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
				missing = append(missing, c)
			} else {
				c.wake()
			}
		}
	}
	if len(missing) == 0 {
		return
	}
	// Under a context of their own, which their callers now end when they
	// give up: ctx may have ended with a caller that is not among them.
	ctx, cancel := batchContext(missing)
	defer cancel()
	pipe = b.client.Pipeline()
	pipe.Ping(ctx) // as above
	live = live[:0]
	for _, c := range missing {
		if c.ctx.Err() != nil { // gone while its script was missing: not sent again
			c.leave()
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	groups = groupCalls(live, b.bySlot, b.batches)
	for _, g := range groups {
		g.queue(ctx, pipe, "eval")
	}
	execErr(pipe.Exec(ctx))
	for _, g := range groups {
		g.answer(ctx)
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
		switch c := cmd.(type) {
		case *redis.StringCmd:
			if c.Err() == nil && c.Val() == "" {
				c.SetErr(err)
			}
		case *redis.SliceCmd:
			if c.Err() == nil && c.Val() == nil {
				c.SetErr(err)
			}
		}
	}
}
