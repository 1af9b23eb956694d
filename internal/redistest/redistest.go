// Package redistest starts real redis-server processes for tests: each on a
// free loopback port, in its own temporary directory, stopped when the test
// ends. Without a redis-server binary the test is skipped, or fails when
// LIMITER_REQUIRE_REDIS=1 (as in CI).
package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process.
type Server struct {
	Port   int
	dir    string
	extra  []string // redis-server arguments given to Start
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	t      testing.TB
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

func binary(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("LIMITER_REQUIRE_REDIS") == "1" {
			t.Fatalf("%s not found and LIMITER_REQUIRE_REDIS=1: %v", name, err)
		}
		t.Skipf("%s not found: %v", name, err)
	}
	return path
}

// freePort returns a loopback port that is free, and whose cluster bus port
// (port + 10000) is free too.
func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port+10000 > 65535 {
			continue
		}
		if bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000)); err == nil {
			_ = bus.Close()
			return port
		}
	}
	t.Fatal("no free port pair found")
	return 0
}

// Start starts a redis-server with extra arguments and stops it when the
// test ends. It never touches the data of any other server.
//
// The port is free when freePort finds it, but another process (another
// package's tests, run at the same time) may bind it before this server
// does: then this server exits, and a readiness check by PING alone would
// be answered by the other process's server, which its own tests kill,
// pause or fill. Start waits for this server's own log to say it is ready,
// and starts it again on another port when the port was taken.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := binary(t, "redis-server")
	s := &Server{dir: t.TempDir(), extra: extra, t: t}
	for try := 1; ; try++ {
		s.Port = pickPort(t)
		err := s.start(bin)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortTaken) || try == startTries {
			t.Fatal(err)
		}
	}
	t.Cleanup(s.Stop)
	return s
}

// pickPort is how Start picks a port: freePort, but in this package's tests.
var pickPort = freePort

// startTries is how many ports Start tries before it gives up.
const startTries = 5

// errPortTaken is start's error when the server could not bind its port.
var errPortTaken = errors.New("redistest: port taken")

// readyLine is what redis-server logs once it listens on its port.
const readyLine = "Ready to accept connections"

// start runs redis-server on s.Port and waits until it is ready: its own
// log says so (its port is its own) and it answers PING.
func (s *Server) start(bin string) error {
	s.t.Helper()
	logPath := filepath.Join(s.dir, "redis.log")
	_ = os.Remove(logPath) // a previous run's (Restart)
	args := append([]string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "redis.log",
	}, s.extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.dir
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	client := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer func() { _ = client.Close() }() // only a readiness probe
	deadline := time.Now().Add(10 * time.Second)
	for {
		log, _ := os.ReadFile(logPath)
		select {
		case <-exited:
			s.cmd = nil
			if bytes.Contains(log, []byte("Address already in use")) {
				return fmt.Errorf("%w: redis-server could not bind %s", errPortTaken, s.Addr())
			}
			return fmt.Errorf("redis-server on %s exited:\n%s", s.Addr(), log)
		default:
		}
		var err error
		if bytes.Contains(log, []byte(readyLine)) {
			err = client.Ping(context.Background()).Err()
			if err == nil || redis.HasErrorPrefix(err, "NOAUTH") { // up, with --requirepass
				return nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("redis-server on %s did not get ready (PING: %v):\n%s", s.Addr(), err, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop kills the server and waits for it to exit. Calling it twice is fine.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart stops the server and starts a fresh one on the same port. It
// fails the test if another process has bound the port in between.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.start(binary(s.t, "redis-server")); err != nil {
		s.t.Fatal(err)
	}
}

// Client returns a client for the server, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Cluster is a Redis Cluster of masters without replicas.
type Cluster struct {
	Masters []*Server
}

// Addrs lists the masters' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		addrs[i] = m.Addr()
	}
	return addrs
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// StartCluster starts n masters with cluster mode on, assigns all slots
// with redis-cli --cluster create, and waits until every node reports the
// cluster ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	cli := binary(t, "redis-cli")
	c := &Cluster{}
	for range n {
		c.Masters = append(c.Masters, Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, m := range c.Masters {
		client := redis.NewClient(&redis.Options{Addr: m.Addr()})
		for {
			info, err := client.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				_ = client.Close()
				t.Fatalf("cluster node %s not ok: %v %s", m.Addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = client.Close()
	}
	return c
}

// String describes the server for messages.
func (s *Server) String() string { return fmt.Sprintf("redis-server %s", s.Addr()) }

// CommandCalls returns how many times the server of admin ran the command
// name (lower case) since its stats were last reset, from INFO
// commandstats; 0 if it has not run it.
func CommandCalls(t testing.TB, admin *redis.Client, name string) int {
	t.Helper()
	calls, _ := CommandStats(t, admin)
	return calls[name]
}

// CommandStats returns, by command name (lower case), how many times the
// server of admin ran each command since its stats were last reset, and
// the microseconds of CPU it spent on them, from INFO commandstats.
func CommandStats(t testing.TB, admin *redis.Client) (calls, usec map[string]int) {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	calls, usec = map[string]int{}, map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isStat := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isStat {
			continue
		}
		for _, field := range strings.Split(fields, ",") {
			key, value, _ := strings.Cut(field, "=")
			if key != "calls" && key != "usec" {
				continue
			}
			n, err := strconv.Atoi(value)
			if err != nil {
				t.Fatalf("commandstats line %q: %v", line, err)
			}
			if key == "calls" {
				calls[name] = n
			} else {
				usec[name] = n
			}
		}
	}
	return calls, usec
}
