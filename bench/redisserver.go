package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// redisServer is a redis-server process of this run: on a free loopback
// port (never 6379), in a temporary directory of its own, with persistence
// off. Stop kills it and removes the directory.
type redisServer struct {
	port int
	dir  string
	cmd  *exec.Cmd
	once sync.Once
}

// addr is the server's host:port.
func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// freePort returns a loopback port that nothing listens on, other than
// Redis's default port.
func freePort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port != 6379 {
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port")
}

// startRedis starts bin (a path, or a name looked up on PATH) and waits
// until it answers PING.
func startRedis(bin string) (*redisServer, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "limiter-bench-redis-")
	if err != nil {
		return nil, err
	}
	s := &redisServer{port: port, dir: dir}
	s.cmd = exec.Command(path,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", "redis.log")
	s.cmd.Dir = dir
	dieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	client := goredis.NewClient(&goredis.Options{Addr: s.addr(), MaxRetries: -1})
	defer func() { _ = client.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := client.Ping(context.Background()).Err()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(dir + "/redis.log")
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer: %v\n%s", s.addr(), err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server, waits for it and removes its directory. It may be
// called more than once, from any goroutine.
func (s *redisServer) stop() {
	s.once.Do(func() {
		if s.cmd.Process != nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
		_ = os.RemoveAll(s.dir)
	})
}

// client returns a new client of the server with a pool of pool
// connections.
func (s *redisServer) client(pool int) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: s.addr(), PoolSize: max(pool, 1)})
}

// redisVersionRE finds the version in `redis-server --version`.
var redisVersionRE = regexp.MustCompile(`v=(\S+)`)

// redisVersion is the version of the redis-server binary bin.
func redisVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	if m := redisVersionRE.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return "unknown"
}
