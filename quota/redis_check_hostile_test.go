package quota

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Hostile tests of New's call to Redis (redis_check.go)
// against servers that do not behave.

// fakeRedis listens on a loopback port and hands each connection to serve;
// it counts the connections it holds open. Closed when the test ends.
type fakeRedis struct {
	ln   net.Listener
	open atomic.Int64
	wg   sync.WaitGroup
}

func startFakeRedis(t *testing.T, serve func(c net.Conn)) *fakeRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fakeRedis{ln: ln}
	var mu sync.Mutex
	var conns []net.Conn
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			f.open.Add(1)
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer f.open.Add(-1)
				defer func() { _ = c.Close() }()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *fakeRedis) addr() string { return f.ln.Addr().String() }

// blackhole reads and never answers.
func blackhole(c net.Conn) {
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// garbage answers every read with reply.
func garbage(reply string) func(c net.Conn) {
	return func(c net.Conn) {
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
			if _, err := c.Write([]byte(reply)); err != nil {
				return
			}
		}
	}
}

// A Redis that accepts and never answers holds New for a bounded time
// (its check, redisCheckTimeout plus a dial's bound, with margin for a
// loaded machine), also for many limiters built at once on clients of
// their own; and once the clients are closed no connection is left open.
func TestHostileBlackholedRedisBoundsNew(t *testing.T) {
	f := startFakeRedis(t, blackhole)
	const n = 16
	var wg sync.WaitGroup
	durations := make([]time.Duration, n)
	errs := make([]error, n)
	clients := make([]*goredis.Client, n)
	for i := range n {
		// Each a store of its own (a DB of its own), so the check's memory
		// does not spare any of them.
		clients[i] = goredis.NewClient(&goredis.Options{Addr: f.addr(), DB: i, MaxRetries: -1})
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, errs[i] = New(Config{Limits: []Limit{{Max: 5, Expiration: time.Second}}, Redis: clients[i], OnStorageError: func(error) {}})
			durations[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i := range n {
		assert.NoError(t, errs[i], "an unanswering Redis is no error at New")
		assert.Less(t, durations[i], 6*time.Second, "New %d held for %v", i, durations[i])
	}
	for _, c := range clients {
		require.NoError(t, c.Close())
	}
	waitFor(t, "the fake Redis's connections to close", func() bool { return f.open.Load() == 0 })
}

// A Redis address that does not answer the dial (an unroutable address,
// a firewall that drops SYNs) with a Dialer that does not take the
// context, as one written with net.Dial does: New must still return
// within its bound, not the dialer's (the kernel's connect timeout is
// minutes).
func TestHostileUnroutableDialerBoundsNew(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	dials := atomic.Int64{}
	client := goredis.NewClient(&goredis.Options{
		Addr: "192.0.2.1:6390", MaxRetries: -1, DialTimeout: 50 * time.Millisecond,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			dials.Add(1)
			select { // a connect that hangs, whatever the context says
			case <-release:
			case <-time.After(20 * time.Second):
			}
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
		},
	})
	t.Cleanup(func() { _ = client.Close() })
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := New(Config{Limits: []Limit{{Max: 5, Expiration: time.Second}}, Redis: client, OnStorageError: func(error) {}})
		done <- err
	}()
	select {
	case err := <-done:
		assert.NoError(t, err)
		assert.Less(t, time.Since(start), 6*time.Second)
	case <-time.After(8 * time.Second):
		t.Errorf("New still blocked after %v on a dial that hangs (dials made: %d)", time.Since(start), dials.Load())
	}
}

// redTeamGarbageChild is the environment variable that makes the test
// binary, run again, be the child of TestHostileGarbageRedisDoesNotCrash.
const redTeamGarbageChild = "LIMITER_REDTEAM29_GARBAGE_ADDR"

// A Redis (or whatever listens at its address) that answers garbage must
// not crash the process, at New nor on a take: New returns (an error or
// not), and the take is answered by the failure policy. The reply here
// announces an array of 2^62 elements, which go-redis tries to make. Run
// in a child process, since a crash would take the test binary down.
func TestHostileGarbageRedisDoesNotCrash(t *testing.T) {
	if addr := os.Getenv(redTeamGarbageChild); addr != "" {
		client := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, Protocol: 2})
		defer func() { _ = client.Close() }()
		l, err := New(Config{Limits: []Limit{{Max: 5, Expiration: time.Second}}, Redis: client, OnStorageError: func(error) {}, StorageTimeout: time.Second})
		if err != nil {
			_, _ = os.Stderr.WriteString("New: " + err.Error() + "\n")
			os.Exit(0) // an error is a fine answer
		}
		res, err := l.Take(context.Background(), "k", 1)
		_, _ = os.Stderr.WriteString("Take: " + res.Source().String() + " " + fmt.Sprint(err) + "\n")
		os.Exit(0)
	}
	for _, reply := range []struct{ name, reply string }{
		{"huge array", "*4611686018427387904\r\n"},
		{"huge map", "%4611686018427387904\r\n"},
		{"huge bulk", "$4611686018427387904\r\n"},
		{"not RESP", "HTTP/1.1 400 Bad Request\r\n\r\n"},
	} {
		t.Run(reply.name, func(t *testing.T) {
			f := startFakeRedis(t, garbage(reply.reply))
			cmd := exec.Command(os.Args[0], "-test.run=^TestHostileGarbageRedisDoesNotCrash$", "-test.count=1")
			cmd.Env = append(os.Environ(), redTeamGarbageChild+"="+f.addr())
			out, err := cmd.CombinedOutput()
			assert.NoError(t, err, "the process crashed on a garbage reply:\n%s", tail(out, 1500))
			t.Logf("child: %s", tail(out, 600))
		})
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
