package main

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

// Replica N listens on the port N-1 above -addr's.
func TestListenConsecutive(t *testing.T) {
	var listeners []net.Listener
	var port int
	for range 20 { // another process may take one of the ports meanwhile
		port = freePort(t)
		if port+2 > 65535 {
			continue
		}
		var err error
		if listeners, err = listenReplicas("127.0.0.1:"+strconv.Itoa(port), 3); err == nil {
			break
		}
	}
	require.Len(t, listeners, 3)
	defer func() { assert.NoError(t, closeAll(listeners)) }()
	for i, ln := range listeners {
		assert.Equal(t, "http://127.0.0.1:"+strconv.Itoa(port+i), baseURL(ln.Addr()))
	}
}

// When a port is taken, listenReplicas names the replica and closes the
// listeners it had opened.
func TestListenPortTaken(t *testing.T) {
	for range 20 { // another process may take one of the ports meanwhile
		port := freePort(t)
		if port+2 > 65535 {
			continue
		}
		taken, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+1))
		if err != nil {
			continue
		}
		_, err = listenReplicas("127.0.0.1:"+strconv.Itoa(port), 3)
		require.NoError(t, taken.Close())
		require.Error(t, err)
		if !strings.HasPrefix(err.Error(), "replica 2: ") {
			continue // replica 1's port was taken too
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		require.NoError(t, err, "replica 1's listener is closed")
		require.NoError(t, ln.Close())
		return
	}
	t.Fatal("found no free port next to one that could be taken")
}

func TestListenBadAddr(t *testing.T) {
	for _, addr := range []string{"3000", "127.0.0.1:http", "127.0.0.1:70000", "127.0.0.1:65535"} {
		_, err := listenReplicas(addr, 3)
		assert.Error(t, err, addr)
	}
}

func TestBaseURL(t *testing.T) {
	assert.Equal(t, "http://127.0.0.1:3000", baseURL(&net.TCPAddr{IP: net.IPv6unspecified, Port: 3000}))
	assert.Equal(t, "http://[::1]:3001", baseURL(&net.TCPAddr{IP: net.IPv6loopback, Port: 3001}))
}
