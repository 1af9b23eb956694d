package limiter

import (
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"sync"
	"weak"
)

// A limiter's identity is where its state lives in a store: every key of
// a limiter starts with
//
//	KeyPrefix + Name + ":" + algorithm tag + ":" + windows + ":"
//
// so that limiters differing in algorithm, in a window or in Name never
// read each other's state, while replicas running the same code compute
// the same prefix and share it exactly. The windows are in the prefix
// because a state means something only under its window (a token bucket's
// debt is counted in units of 1/window token); Max and Burst are not, so a
// deploy that changes them keeps the counts. Name holds no ':' and neither
// do the tag and the windows, so after a given KeyPrefix the prefixes of
// two limiters are never one the start of the other: no client key can
// reach another limiter's state.

// keyPrefix is the identity of a limiter with cfg (defaults applied),
// algorithm alg and limits ls.
func keyPrefix(cfg *Config, alg algorithm, ls *limits) string {
	b := append([]byte(cfg.KeyPrefix), cfg.Name...)
	b = append(b, ':')
	b = append(b, alg.name()...)
	b = append(b, ':')
	for i, r := range ls.r[:ls.n] {
		if i > 0 {
			b = append(b, '+')
		}
		b = appendWindow(b, r.window)
	}
	return string(append(b, ':'))
}

// appendWindow appends a window of ms milliseconds in a short form, one per
// value: hours, minutes and seconds ("1h30m", "15s") when it is whole
// seconds, else milliseconds ("1500ms").
func appendWindow(b []byte, ms int64) []byte {
	if ms%1000 != 0 {
		return append(strconv.AppendInt(b, ms, 10), "ms"...)
	}
	s := ms / 1000
	for _, unit := range [...]struct {
		secs int64
		name byte
	}{{3600, 'h'}, {60, 'm'}, {1, 's'}} {
		if n := s / unit.secs; n > 0 {
			b = append(strconv.AppendInt(b, n, 10), unit.name)
			s -= n * unit.secs
		}
	}
	return b
}

// identities records, for each store in use and identity in it, the
// limiters of this process that keep their state there, so that New can
// refuse a second limiter that would read the first one's state. Entries
// hold the limiters weakly: a limiter that is gone (an app rebuilt, a test
// over) frees its identity.
var identities = identityRegistry{m: map[identity][]identityUser{}}

type identityRegistry struct {
	sync.Mutex
	m map[identity][]identityUser
}

// identity is a store (by address: the identity of a limiter that still
// holds the store keeps the address from being reused) and a key prefix.
type identity struct {
	store  uintptr
	prefix string
}

type identityUser struct {
	handler weak.Pointer[handler]
	named   bool // its Name was set: sharing it is asked for
}

// storeAddress is the address that tells store apart from other stores,
// or 0 when it has none (a value that is not a pointer). A Redis storage
// is told by its client, so that two storages over one client are one.
func storeAddress(store any) uintptr {
	if conn, ok := store.(redisConn); ok {
		store = conn.Conn()
	}
	v := reflect.ValueOf(store)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.UnsafePointer:
		return v.Pointer()
	}
	return 0
}

// claimIdentity records that h keeps its state under prefix in store, and
// panics when another live limiter of this process does too and the two
// did not both ask for it with the same Name.
func claimIdentity(h *handler, store any, prefix string, named bool) {
	addr := storeAddress(store)
	if addr == 0 {
		return
	}
	id := identity{store: addr, prefix: prefix}
	identities.Lock()
	defer identities.Unlock()
	if clash := identities.live(id, named); clash {
		// The other limiter may be garbage that no collection has found
		// yet (an app that was dropped): look once more after one.
		identities.Unlock()
		runtime.GC()
		identities.Lock()
		if identities.live(id, named) {
			panic(fmt.Sprintf("limiter: another limiter of this process keeps its state in the same Storage under %q (the same algorithm and Expiration, and no Name); "+
				"give each limiter its own Name (Config.Name, say the route: \"login\"), or the same Name to both if they are to share one count", prefix))
		}
	}
	identities.m[id] = append(identities.m[id], identityUser{handler: weak.Make(h), named: named})
}

// live drops the users of id that are gone and reports whether one that
// would clash with a new user (named or not) is left: any, unless both are
// named.
func (r *identityRegistry) live(id identity, named bool) bool {
	users := r.m[id][:0]
	clash := false
	for _, u := range r.m[id] {
		if u.handler.Value() == nil {
			continue
		}
		users = append(users, u)
		if !(named && u.named) {
			clash = true
		}
	}
	if len(users) == 0 {
		delete(r.m, id)
	} else {
		r.m[id] = users
	}
	return clash
}
