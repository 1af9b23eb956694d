package main

import (
	"fmt"
	"io"
	"strings"
)

// printUsage writes the startup message: where the replicas serve, where
// their limits live, the routes, and commands to try them with. redis is
// nil when the limits are in memory.
func printUsage(w io.Writer, urls []string, redis *redisTarget, demo demoConfig) {
	n := len(urls)
	var b strings.Builder
	switch {
	case n == 1 && redis == nil:
		fmt.Fprintf(&b, "Serving on %s (in-memory limiter; Ctrl+C to stop)\n", urls[0])
	case n == 1:
		fmt.Fprintf(&b, "Serving on %s (limits shared through Redis; Ctrl+C to stop)\n", urls[0])
	default:
		fmt.Fprintf(&b, "Serving %d replicas in one process, each with its own limiters (Ctrl+C to stop):\n", n)
		for i, u := range urls {
			fmt.Fprintf(&b, "  replica %d  %s\n", i+1, u)
		}
	}

	switch {
	case redis == nil && n == 1:
		b.WriteString("No -redis: limits are kept in memory, for this process only.\n")
	case redis == nil:
		fmt.Fprintf(&b, "No -redis: limits are kept in memory, each replica in its own, so %d replicas admit up to %d×%d = %d on /demo, not %d.\n"+
			"Add -redis redis://host:port/db to share one quota.\n", n, n, demo.Limit, n*demo.Limit, demo.Limit)
	case n == 1:
		fmt.Fprintf(&b, "Limits are kept in Redis at %s: copies of this app using that Redis share them.\n", redis)
	default:
		fmt.Fprintf(&b, "Limits are kept in Redis at %s, shared by the %d replicas, each with its own client:\n"+
			"together they admit %d on /demo, not %d each.\n", redis, n, demo.Limit, demo.Limit)
	}

	fmt.Fprintf(&b, `
Routes (every response names its replica in X-Replica):
  GET /               fixed window: 5 requests per 10s per client IP
  GET /api/cheap      token bucket: burst 6, refills 1 token/s, costs 1
  GET /api/expensive  the same bucket, costs 3
  GET /demo           %s

Try (the 6th request to / gets 429 with Retry-After):
  for i in 1 2 3 4 5 6; do curl -si %[2]s/ | grep -iE '^(HTTP|X-RateLimit|Retry-After)'; echo; done
  for i in 1 2 3; do curl -si %[2]s/api/expensive | grep -iE '^(HTTP|X-RateLimit|Retry-After)'; echo; done
`, demo.describe(), urls[0])

	requests := demo.Limit + max(demo.Limit/5, 1)
	fmt.Fprintf(&b, `
Load generator, in another terminal: %d requests to /demo, round-robin over the replicas:
  go run ./example/loadgen -n %d -targets %s -path /demo -c 32
`, requests, requests, strings.Join(urls, ","))
	if redis == nil {
		b.WriteString("The /demo quota lasts an hour; restart the replicas to start over.\n")
	} else {
		// A replica's deny cache keeps a rejection for 900 ms at most.
		fmt.Fprintf(&b, "The /demo quota lasts an hour, in Redis. To start over, run\n"+
			"  %s\n"+
			"and every replica admits again within a second.\n",
			redis.cli("DEL "+demo.redisKey()))
	}
	_, _ = io.WriteString(w, b.String())
}
