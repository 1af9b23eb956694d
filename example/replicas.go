package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
)

// shutdownTimeout bounds how long a replica waits for its in-flight
// requests at shutdown.
const shutdownTimeout = 5 * time.Second

// replica is one app of a replicaSet, serving on a listener of its own.
type replica struct {
	url    string
	ln     net.Listener
	app    *fiber.App
	store  *redis.Store  // nil in memory
	served chan struct{} // closed when the app's Listener has returned
}

// replicaSet is a number of replicas of the app in this process, each with
// its own limiters and, with -redis, its own Redis client, as separate
// processes would have.
type replicaSet struct {
	replicas []*replica
	redis    *redisTarget // nil in memory
	stopped  chan error   // why a replica stopped serving on its own
}

// startReplicas opens opts.replicas Redis clients (with -redis) and
// listeners, and serves an app on each. Storage failures are reported to
// logs. On error, nothing is left running.
func startReplicas(ctx context.Context, opts options, logs io.Writer) (_ *replicaSet, err error) {
	s := &replicaSet{stopped: make(chan error, opts.replicas)}
	stores := make([]*redis.Store, opts.replicas)
	defer func() {
		if err != nil {
			err = errors.Join(err, closeStores(stores))
		}
	}()
	if opts.redisURL != "" {
		for i := range stores {
			store, target, err := openRedis(ctx, opts.redisURL)
			if err != nil {
				return nil, err
			}
			stores[i], s.redis = store, &target
		}
	}
	listeners, err := listenReplicas(opts.addr, opts.replicas)
	if err != nil {
		return nil, err
	}

	var logMu sync.Mutex // replicas report storage errors concurrently
	for i, ln := range listeners {
		number := i + 1
		cfg := appConfig{replica: number, demo: opts.demo, storageTimeout: opts.storageTimeout}
		if stores[i] != nil {
			cfg.storage = stores[i]
			cfg.onStorageError = func(err error) {
				logMu.Lock()
				defer logMu.Unlock()
				// A log line that cannot be written has nowhere else to go.
				_, _ = fmt.Fprintf(logs, "replica %d: %v (requests fall back to this replica's memory until Redis answers)\n", number, err)
			}
		}
		r := &replica{url: baseURL(ln.Addr()), ln: ln, app: newApp(cfg), store: stores[i], served: make(chan struct{})}
		s.replicas = append(s.replicas, r)
		go func() {
			defer close(r.served)
			if err := r.app.Listener(ln); err != nil {
				s.stopped <- fmt.Errorf("replica %d stopped serving: %w", number, err)
			}
		}()
	}
	return s, nil
}

// urls lists the replicas' base URLs, replica 1 first.
func (s *replicaSet) urls() []string {
	urls := make([]string, len(s.replicas))
	for i, r := range s.replicas {
		urls[i] = r.url
	}
	return urls
}

// shutdown stops every replica, letting in-flight requests finish, and
// closes their Redis clients.
func (s *replicaSet) shutdown() error {
	var errs []error
	stores := make([]*redis.Store, len(s.replicas))
	for i, r := range s.replicas {
		if err := r.app.ShutdownWithTimeout(shutdownTimeout); err != nil {
			errs = append(errs, fmt.Errorf("replica %d: shutdown: %w", i+1, err))
		}
		// A Shutdown that comes before the server has taken the listener
		// does not close it; closing it here ends such a Listener call at
		// once. Otherwise the listener is closed already.
		_ = r.ln.Close()
		<-r.served
		stores[i] = r.store
	}
	return errors.Join(append(errs, closeStores(stores))...)
}

// closeStores closes the Redis clients of the stores that are not nil.
func closeStores(stores []*redis.Store) error {
	var errs []error
	for i, store := range stores {
		if store == nil {
			continue
		}
		if err := store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("replica %d: close Redis client: %w", i+1, err))
		}
	}
	return errors.Join(errs...)
}
