package quota

import (
	"fmt"
	"github.com/fiberlimit/limiter/internal/timestep"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	goredis "github.com/redis/go-redis/v9"
)

// A limiter's identity is where its state lives in a store: every key of
// a limiter starts with
//
//	KeyPrefix + Name + ":" + algorithm tag + ":" + windows + ":"
//
// so that limiters differing in algorithm, in a window or in Name never
// read each other's state, while replicas running the same code compute
// the same prefix and share it exactly. The windows (and a time step
// other than 1 ms, as "720h@1152ms") are in the prefix because a state
// means something only under its window and step (a token bucket's
// debt is counted in units of 1/window token); Max and Burst are not, so a
// deploy that changes them keeps the counts. Name holds no ':' and neither
// do the tag and the windows, so after a given KeyPrefix the prefixes of
// two limiters are never one the start of the other: no client key can
// reach another limiter's state.

// keyPrefix is the identity of a limiter with cfg (defaults applied),
// algorithm alg and limits ls: the windows as configured, in ms.
func keyPrefix(cfg *Config, alg Algorithm, ls *limits) string {
	b := append([]byte(cfg.KeyPrefix), cfg.Name...)
	b = append(b, ':')
	b = append(b, alg.name()...)
	b = append(b, ':')
	for i, r := range ls.r[:ls.n] {
		if i > 0 {
			b = append(b, '+')
		}
		if cfg.VaryExpiration {
			// The window is in each key instead (see storedKey): the
			// prefix says so, so that no key of such a limiter is one of a
			// limiter with a window of its own.
			b = append(b, '~')
			continue
		}
		b = timestep.AppendWindow(b, timestep.Millis(cfg.Limits[i].Expiration))
		if r.step > 1 {
			// A state is kept in steps: another step is another state.
			b = append(strconv.AppendInt(append(b, '@'), r.step, 10), "ms"...)
		}
	}
	return string(append(b, ':'))
}

// identities records, for each store in use and identity in it, the
// limiters of this process that keep their state there, so that New can
// refuse a second limiter that would read the first one's state. Entries
// hold the limiters weakly, and a limiter that is gone (an app rebuilt, a
// test over) frees its identity: its cleanup drops it.
var identities = identityRegistry{m: map[identity][]identityUser{}}

type identityRegistry struct {
	sync.Mutex
	m map[identity][]identityUser
}

// identity is a store, by what it reaches (see storeIdentity), and a key
// prefix.
type identity struct {
	store  string
	prefix string
}

type identityUser struct {
	handler weak.Pointer[Limiter]
	named   bool // its Name was set: sharing it is asked for
}

// storeIdentity tells a store apart from other stores, or is "" when it
// cannot be told (a value that is not a pointer). A Redis storage is told
// by the server it reaches, so that two storages, or two clients, of one
// Redis are one store: the address and database of a client, whatever
// ACL user it logs in as (users share the keys), a failover client by its
// own address, since its server changes; the sorted seed addresses of a
// cluster or ring. Any other storage by its address in
// memory.
func storeIdentity(store any) string {
	if conn, ok := store.(redisConn); ok {
		store = conn.Conn()
	}
	if client, ok := store.(goredis.UniversalClient); ok {
		switch c := client.(type) {
		case *goredis.Client:
			if o := c.Options(); o.Addr != "FailoverClient" {
				return fmt.Sprintf("redis %s/%d", o.Addr, o.DB)
			}
		case *goredis.ClusterClient:
			addrs := slices.Clone(c.Options().Addrs)
			slices.Sort(addrs)
			return "redis cluster " + strings.Join(addrs, ",")
		case *goredis.Ring:
			addrs := slices.Sorted(maps.Values(c.Options().Addrs))
			return "redis ring " + strings.Join(addrs, ",")
		}
	}
	v := reflect.ValueOf(store)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.UnsafePointer:
		return fmt.Sprintf("%T %#x", store, v.Pointer())
	}
	return ""
}

// claimIdentity records that h keeps its state under prefix in store, or
// returns an error when another live limiter of this process does too and
// the two did not both ask for it with the same Name.
func claimIdentity(h *Limiter, store any, prefix string, named bool) error {
	id := identity{store: storeIdentity(store), prefix: prefix}
	if id.store == "" {
		return nil
	}
	identities.Lock()
	defer identities.Unlock()
	if identities.live(id, named) {
		// The other limiter may be garbage that no collection has found
		// yet (an app that was dropped, whose last request's goroutine may
		// still be ending): look again after a few collections, 50 ms at
		// most. Only a New that would otherwise panic waits.
		clash := true
		for range clashLooks {
			identities.Unlock()
			runtime.GC()
			time.Sleep(5 * time.Millisecond)
			identities.Lock()
			if clash = identities.live(id, named); !clash {
				break
			}
		}
		if clash {
			return fmt.Errorf("limiter: another limiter of this process keeps its state in the same Storage under %q (the same algorithm and Expiration, and no Name); "+
				"give each limiter its own Name (Config.Name, say the route: \"login\"), or the same Name to both if they are to share one count", prefix)
		}
	}
	identities.m[id] = append(identities.m[id], identityUser{handler: weak.Make(h), named: named})
	runtime.AddCleanup(h, func(id identity) {
		identities.Lock()
		identities.live(id, false)
		identities.Unlock()
	}, id)
	return nil
}

// clashLooks is how many times claimIdentity looks again for a clash.
const clashLooks = 10

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
		if !named || !u.named {
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
