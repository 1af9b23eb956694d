package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

// listenReplicas opens n listeners on consecutive ports from addr's
// (host:3000 gives host:3000, host:3001, ...). A port of 0 gives each
// listener a free port of its own. On error it closes what it opened.
func listenReplicas(addr string, n int) ([]net.Listener, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("-addr %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("-addr %q: want a port number", addr)
	}
	if port != 0 && port+n-1 > 65535 {
		return nil, fmt.Errorf("-addr %q: %d replicas need ports up to %d", addr, n, port+n-1)
	}
	listeners := make([]net.Listener, 0, n)
	for i := range n {
		p := port
		if port != 0 {
			p += i
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("replica %d: %w", i+1, err), closeAll(listeners))
		}
		listeners = append(listeners, ln)
	}
	return listeners, nil
}

// closeAll closes every listener and joins their errors.
func closeAll(listeners []net.Listener) error {
	var errs []error
	for _, ln := range listeners {
		if err := ln.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// baseURL is the URL to reach a listener at, with a loopback host when it
// listens on every interface.
func baseURL(a net.Addr) string {
	host, port, _ := net.SplitHostPort(a.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
