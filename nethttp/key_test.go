package nethttp

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// By default a client is keyed by its address: an IPv6 client by its /64,
// so a host cannot rotate past the limit within its network; IPv6Prefix
// 128 keys each address on its own.
func TestRemoteAddressKeys(t *testing.T) {
	h := New(Config{Max: 2})(http.HandlerFunc(ok))
	assert.Equal(t, 200, from(h, "[2001:db8:1:2::1]:1000").StatusCode)
	assert.Equal(t, 200, from(h, "[2001:db8:1:2::ffff]:2000").StatusCode)
	assert.Equal(t, 429, from(h, "[2001:db8:1:2:aaaa::9]:3000").StatusCode, "the same /64")
	assert.Equal(t, 200, from(h, "[2001:db8:1:3::1]:1000").StatusCode, "another /64")
	assert.Equal(t, 200, from(h, "203.0.113.7:1").StatusCode)

	each := New(Config{Max: 1, IPv6Prefix: 128})(http.HandlerFunc(ok))
	assert.Equal(t, 200, from(each, "[2001:db8::1]:1").StatusCode)
	assert.Equal(t, 200, from(each, "[2001:db8::2]:1").StatusCode)
	assert.Equal(t, 429, from(each, "[2001:DB8:0::2]:9").StatusCode, "the same address, spelled otherwise")
}
