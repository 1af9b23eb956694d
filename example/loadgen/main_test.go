package main

import (
	"bytes"
	"flag"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/example/internal/loadgen"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want loadgen.Options
	}{
		{"defaults", nil, loadgen.Options{
			Targets: []string{"http://127.0.0.1:3000"}, Path: "/demo", Requests: 1200, Concurrency: 32,
		}},
		{"README's command", []string{"-n", "1200", "-targets", "http://127.0.0.1:3000,http://127.0.0.1:3001,http://127.0.0.1:3002", "-path", "/demo", "-c", "32"}, loadgen.Options{
			Targets: []string{"http://127.0.0.1:3000", "http://127.0.0.1:3001", "http://127.0.0.1:3002"}, Path: "/demo", Requests: 1200, Concurrency: 32,
		}},
		{"blanks and spaces dropped", []string{"-targets", " http://a:1 ,, http://b:2,", "-timeout", "2s", "-path", "/"}, loadgen.Options{
			Targets: []string{"http://a:1", "http://b:2"}, Path: "/", Requests: 1200, Concurrency: 32, Timeout: 2 * time.Second,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFlags(tc.args, &bytes.Buffer{})
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}

	var usage bytes.Buffer
	_, err := parseFlags([]string{"-h"}, &usage)
	require.ErrorIs(t, err, flag.ErrHelp)
	assert.Contains(t, usage.String(), "-targets")
	for _, bad := range [][]string{{"extra"}, {"-n", "x"}, {"-nope"}} {
		_, err := parseFlags(bad, &bytes.Buffer{})
		assert.Error(t, err, "%q", bad)
	}
}
