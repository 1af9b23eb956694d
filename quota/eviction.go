package quota

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// ErrStorageEvicts is wrapped by the warning that Config.OnStorageError
// gets (or the standard logger, without a hook) when a Redis that holds the
// limiter's keys is set to evict keys at its memory limit: maxmemory set,
// and a maxmemory-policy other than noeviction. Every limiter key has a
// TTL, so the volatile-* policies may take them as readily as the
// allkeys-* ones. A key that Redis evicts forgets what its client has
// spent: the client starts afresh, and can be admitted beyond its limit.
var ErrStorageEvicts = errors.New("limiter: Redis may evict rate-limit keys")

// evictionCheckEvery is how often (ms) a limiter on Redis looks again at
// its servers' eviction settings while it is used; evictionRetry is how
// soon it tries again when it could not look (Redis out of reach).
const (
	evictionCheckEvery = 60 * 60 * 1000
	evictionRetry      = 60 * 1000
)

// checkEviction reads INFO memory of every node that holds keys of client
// (every master of a cluster, every shard of a ring). It returns in how
// many ms to look again (evictionCheckEvery; evictionRetry when a node was
// out of reach; never, -1, when the server refuses INFO, which is then the
// warning), and a warning wrapping ErrStorageEvicts that names the nodes
// that would evict, or nil when none would.
func checkEviction(ctx context.Context, client goredis.UniversalClient) (next int64, warning error) {
	var mu sync.Mutex
	var evicting []string
	var failed error
	check := func(ctx context.Context, node *goredis.Client) error {
		// Through a copy whose reads end by ctx's deadline, which the
		// client itself may not honour (see redis.New).
		timeout := time.Second
		if deadline, ok := ctx.Deadline(); ok {
			timeout = max(time.Millisecond, time.Until(deadline))
		}
		info, err := node.WithTimeout(timeout).Info(ctx, "memory").Result()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = errors.Join(failed, fmt.Errorf("%s: %w", node.Options().Addr, err))
			return nil // the other nodes are still looked at
		}
		maxmemory, policy := memoryPolicy(info)
		if maxmemory > 0 && policy != "noeviction" && policy != "" {
			evicting = append(evicting, fmt.Sprintf("%s (maxmemory %d bytes, maxmemory-policy %s)", node.Options().Addr, maxmemory, policy))
		}
		return nil
	}
	switch c := client.(type) {
	case *goredis.Client:
		_ = check(ctx, c)
	case *goredis.ClusterClient:
		if err := c.ForEachMaster(ctx, check); err != nil {
			failed = errors.Join(failed, err)
		}
	case *goredis.Ring:
		if err := c.ForEachShard(ctx, check); err != nil {
			failed = errors.Join(failed, err)
		}
	default:
		return -1, nil
	}
	if len(evicting) > 0 {
		return evictionCheckEvery, fmt.Errorf("%w: %s: at that memory limit it drops keys, and a client whose key it drops can be admitted again beyond its limit; "+
			"give the limiter a Redis of its own, or set maxmemory-policy noeviction (Redis then refuses writes when full, and the limiter's FailurePolicy decides)",
			ErrStorageEvicts, strings.Join(evicting, ", "))
	}
	if failed == nil {
		return evictionCheckEvery, nil
	}
	var reply goredis.Error // an error reply from the server
	if errors.As(failed, &reply) {
		msg := reply.Error()
		if strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "ERR unknown command") || !refusesService(msg) {
			// INFO refused (a managed Redis that renames it, or an ACL
			// without it): there is no telling, and no use asking again.
			return -1, fmt.Errorf("limiter: could not check whether Redis may evict rate-limit keys (INFO memory: %w); make sure its maxmemory-policy is noeviction", failed)
		}
	}
	return evictionRetry, nil
}

// memoryPolicy reads maxmemory (bytes) and maxmemory_policy from the text
// of INFO memory.
func memoryPolicy(info string) (maxmemory int64, policy string) {
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "maxmemory:"); ok {
			maxmemory, _ = strconv.ParseInt(v, 10, 64)
		} else if v, ok := strings.CutPrefix(line, "maxmemory_policy:"); ok {
			policy = v
		}
	}
	return maxmemory, policy
}

// evictionChecker is a backend that can tell whether its store is set to
// drop keys (see checkEviction).
type evictionChecker interface {
	checkEviction(ctx context.Context) (next int64, warning error)
}

// checkSettings looks at the store's settings on a goroutine of its own,
// unless another call has just started to (next is the time it was due):
// the first decision does, and then one every evictionCheckEvery. A store
// that may drop the limiter's keys is reported to the hook.
func (g *guardedStore) checkSettings(next int64) {
	if !g.nextCheck.CompareAndSwap(next, math.MaxInt64) {
		return
	}
	go func() {
		after := int64(evictionRetry)
		defer func() {
			// A panic (in a go-redis hook, say) is the look's failure, not
			// the process's.
			if p := recover(); p != nil {
				log.Printf("limiter: checking whether Redis may evict rate-limit keys panicked: %v", p)
			}
			if after >= 0 {
				g.nextCheck.Store(g.now() + after)
			}
		}()
		ctx, cancel := context.WithTimeout(g.life, max(g.timeout, time.Second))
		defer cancel()
		var warning error
		after, warning = g.store.(evictionChecker).checkEviction(ctx)
		if warning != nil && g.life.Err() == nil {
			g.warn(warning)
		}
	}()
}
