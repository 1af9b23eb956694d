package quota

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/fiberlimit/limiter/internal/timestep"
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
// algorithm alg and limits ls: the windows as configured, in ms. apart
// keeps the keys of a Storage on go-redis given to quota directly apart
// from those earlier releases wrote through its Get and Set.
func keyPrefix(cfg *Config, alg Algorithm, ls *limits, apart bool) string {
	b := append([]byte(cfg.KeyPrefix), cfg.Name...)
	b = append(b, ':')
	if apart {
		// A Storage on go-redis given to quota itself, decided by the Lua
		// engine: earlier releases read and wrote its keys through Get
		// and Set, in another layout (see redisengine.Handed).
		b = append(b, "lua."...)
	}
	b = append(b, alg.name()...)
	b = append(b, ':')
	for i, r := range ls.r[:ls.n] {
		if i > 0 {
			b = append(b, '+')
		}
		if cfg.VaryExpiration {
			// The window is in each key instead (see windowedKey): the
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
// test over) frees its identity: its cleanup marks it gone, and the users
// of an identity are swept once half of them are, so that clean-up costs
// O(1) a limiter however many share an identity.
//
// Only a collection tells a limiter that is gone from one that is not, so
// New collects garbage when it meets another user of its identity; but
// not at every New, which would cost a handler that builds its limiter
// per request (dynamic per-tenant limits) a collection per request. When
// every user met came after New last collected for that identity, less
// than clashLookEvery ago, New accepts the new one unchecked, and the
// registry looks after the next collection, whatever starts it: a clash
// found then is reported to the new limiter's OnStorageError hook (or
// logged), once per identity.
//
// Nothing here asks a weak pointer for its value between collections:
// during the marking of one, that would keep a limiter that is garbage
// for that collection, and a later look would take it for live.
var identities = identityRegistry{m: map[identity]*identityUsers{}}

type identityRegistry struct {
	sync.Mutex
	m     map[identity]*identityUsers
	added uint64 // users added so far, the next one's seq
	// idle are identities left without users while their last look was
	// recent: kept until it is not, so that they still remember it.
	idle []identity
}

// identity is a store, by what it reaches (see storeIdentity), and a key
// prefix.
type identity struct {
	store  string
	prefix string
}

// identityUsers are the limiters of one identity, in the order they came.
type identityUsers struct {
	users   []identityUser
	gone    int // users marked gone since the last sweep
	unnamed int // users not marked gone without a Name
	// looks counts New's collections for a clash, the last at looked.
	looks    uint64
	looked   time.Time
	lookDue  bool // lookAgain is to run after the next collection
	reported bool // a clash found by lookAgain was reported
}

type identityUser struct {
	alive func() bool // whether its Limiter (or Concurrency) is still reachable
	seq   uint64      // the registry's added when it came
	since uint64      // its identity's looks when it came
	named bool        // its Name was set: sharing it is asked for
	gone  bool        // its cleanup has run, or a look found it gone
	// unchecked is where to report a clash that New did not look for,
	// until lookAgain has.
	unchecked func(error)
}

// clashes tells whether u and a user named or not would read each other's
// state unasked: unless both are named.
func (u *identityUser) clashes(named bool) bool { return !named || !u.named }

// storeIdentity tells a store apart from other stores, or is "" when it
// cannot be told (a value that is not a pointer). A Redis storage is told
// by the server it reaches, so that two storages, or two clients, of one
// Redis are one store: the address and database of a client, whatever
// ACL user it logs in as (users share the keys); the sorted seed addresses
// of a cluster or ring. A client whose address does not say where it goes
// is told by its address in memory, a store of its own: a failover
// client, whose server changes, and a client with a Dialer of its own
// (a tunnel, a proxy), which may take the same Addr anywhere. Any other
// storage by its address in memory.
func storeIdentity(store any) string {
	if conn, ok := store.(redisConn); ok {
		store = conn.Conn()
	}
	if client, ok := store.(goredis.UniversalClient); ok {
		switch c := client.(type) {
		case *goredis.Client:
			if o := c.Options(); o.Addr != "FailoverClient" && !ownDialer(o.Dialer) {
				return fmt.Sprintf("redis %s/%d", o.Addr, o.DB)
			}
		case *goredis.ClusterClient:
			if o := c.Options(); !ownDialer(o.Dialer) {
				addrs := slices.Clone(o.Addrs)
				slices.Sort(addrs)
				return "redis cluster " + strings.Join(addrs, ",")
			}
		case *goredis.Ring:
			if o := c.Options(); !ownDialer(o.Dialer) {
				addrs := slices.Sorted(maps.Values(o.Addrs))
				return "redis ring " + strings.Join(addrs, ",")
			}
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
// the two did not both ask for it with the same Name; warn is told of a
// clash found later (see lookAfterGC).
func claimIdentity[T any](h *T, warn func(error), store any, prefix string, named bool) error {
	id := identity{store: storeIdentity(store), prefix: prefix}
	if id.store == "" {
		return nil
	}
	identities.Lock()
	defer identities.Unlock()
	identities.dropIdle()
	e := identities.users(id)
	held := weak.Make(h)
	user := identityUser{alive: func() bool { return held.Value() != nil }, named: named}
	if other := e.clash(named); other != nil {
		if other.since == e.looks && time.Since(e.looked) < clashLookEvery {
			// Every user met came after a look a moment ago: most likely
			// the garbage of a limiter built per request.
			user.unchecked = warn
		} else if err := identities.look(id, named); err != nil {
			return err
		}
		e = identities.users(id) // a sweep may have dropped it meanwhile
	}
	user.seq, user.since = identities.added, e.looks
	identities.added++
	e.users = append(e.users, user)
	if !named {
		e.unnamed++
	}
	runtime.AddCleanup(h, identities.userGone, userOf{id, user.seq})
	if user.unchecked != nil {
		e.lookAfterGC(id)
	}
	return nil
}

// clashLookEvery is how often, at most, New collects garbage to look for
// a clash among users of one identity that all came after the last look.
const clashLookEvery = time.Second

// clashLooks is how many times claimIdentity looks again for a clash after
// its first look finds one.
const clashLooks = 10

// users is the entry of id, made if there is none. Its caller holds r.
func (r *identityRegistry) users(id identity) *identityUsers {
	e := r.m[id]
	if e == nil {
		e = &identityUsers{}
		r.m[id] = e
	}
	return e
}

// clash returns the first user not known to be gone that would clash with
// a new user (named or not), or nil. Users come in order, so that none
// came before the last look unless this one did.
func (e *identityUsers) clash(named bool) *identityUser {
	if named && e.unnamed == 0 {
		return nil // users that share on purpose, as many as they are
	}
	for len(e.users) > 0 && e.users[0].gone {
		e.users = e.users[1:]
		e.gone--
	}
	for i := range e.users {
		if u := &e.users[i]; !u.gone && u.clashes(named) {
			return u
		}
	}
	return nil
}

// look collects garbage and returns an error if a user of id that would
// clash with a new one (named or not) is still live. The other limiter may
// be garbage that no collection has found yet (an app that was dropped,
// whose last request's goroutine may still be ending): it looks again
// after a few collections, 50 ms at most. Only a New that would otherwise
// fail waits. Its caller holds r, which it releases while it collects.
func (r *identityRegistry) look(id identity, named bool) error {
	e := r.m[id]
	e.looks++
	e.looked = time.Now()
	for i := range clashLooks + 1 {
		r.Unlock()
		if i > 0 {
			time.Sleep(5 * time.Millisecond)
		}
		runtime.GC()
		r.Lock()
		e = r.m[id]
		if e == nil {
			return nil
		}
		live := false
		for j := range e.users {
			if u := &e.users[j]; !u.gone && u.clashes(named) {
				if !u.alive() { // just after a collection
					e.markGone(u)
				} else {
					live = true
				}
			}
		}
		r.sweep(id, e)
		if !live {
			return nil
		}
	}
	return clashError(id.prefix)
}

func clashError(prefix string) error {
	what := "the same algorithm and Expiration"
	if strings.HasSuffix(prefix, ":slots{") {
		what = "both a Concurrency"
	}
	return fmt.Errorf("limiter: another limiter of this process keeps its state in the same Storage under %q (%s, and no Name); "+
		"give each limiter its own Name (Config.Name, say the route: \"login\"), or the same Name to both if they are to share one count", prefix, what)
}

// userOf names a user: its identity and seq.
type userOf struct {
	id  identity
	seq uint64
}

// userGone marks a user gone: the cleanup of its limiter.
func (r *identityRegistry) userGone(u userOf) {
	r.Lock()
	defer r.Unlock()
	r.dropIdle()
	if e := r.m[u.id]; e != nil {
		if i, ok := slices.BinarySearchFunc(e.users, u.seq, func(u identityUser, seq uint64) int { return cmp.Compare(u.seq, seq) }); ok {
			e.markGone(&e.users[i])
			r.sweep(u.id, e)
		}
	}
}

// markGone marks u, a user of e, gone unless it is already.
func (e *identityUsers) markGone(u *identityUser) {
	if !u.gone {
		u.gone = true
		u.unchecked = nil
		e.gone++
		if !u.named {
			e.unnamed--
		}
	}
}

// sweep drops the users of id that are gone once they are half of them, so
// that a sweep costs at most two marks since the last, and id once none is
// left.
func (r *identityRegistry) sweep(id identity, e *identityUsers) {
	if 2*e.gone < len(e.users) {
		return
	}
	e.users = slices.DeleteFunc(e.users, func(u identityUser) bool { return u.gone })
	e.gone = 0
	if len(e.users) == 0 {
		if time.Since(e.looked) < clashLookEvery {
			r.idle = append(r.idle, id)
		} else {
			delete(r.m, id)
		}
	}
}

// dropIdle drops the identities left without users whose last look is no
// longer recent, oldest first.
func (r *identityRegistry) dropIdle() {
	for len(r.idle) > 0 {
		e := r.m[r.idle[0]]
		if e != nil && time.Since(e.looked) < clashLookEvery {
			return
		}
		if e != nil && len(e.users) == 0 {
			delete(r.m, r.idle[0])
		}
		r.idle = r.idle[1:]
	}
}

// lookAfterGC makes lookAgain run for id after the next collection, unless
// it is to already.
func (e *identityUsers) lookAfterGC(id identity) {
	if e.lookDue {
		return
	}
	e.lookDue = true
	runtime.AddCleanup(new(gcMark), identities.lookAgain, laterLook{id, identities.added})
}

// gcMark is garbage from the start: its cleanup runs after the next
// collection. (It holds a pointer, so that it is none of the tiny objects
// that the runtime packs together, whose cleanups may never run.)
type gcMark struct{ _ *byte }

// laterLook is a look after a collection at the users of id that came
// before it was asked for: the collection started after they came (a
// collection under way then would have kept the gcMark too), so that one
// of them that is garbage is gone then. A limiter made while a collection
// is under way outlives it.
type laterLook struct {
	id     identity
	before uint64 // users with a lower seq
}

// lookAgain looks, after a collection, for a clash between each user that
// New accepted unchecked and came before look was asked for, and another
// such user that is live: one found is reported once per identity, on a
// goroutine of its own, since cleanups must not block. Users that came
// later wait for another look.
func (r *identityRegistry) lookAgain(look laterLook) {
	r.Lock()
	defer r.Unlock()
	e := r.m[look.id]
	if e == nil {
		return
	}
	e.lookDue = false
	var live []*identityUser // that came before look was asked for
	later := false
	for i := range e.users {
		u := &e.users[i]
		switch {
		case u.gone:
		case u.seq >= look.before:
			later = later || u.unchecked != nil
		case !u.alive(): // just after a collection
			e.markGone(u)
		default:
			live = append(live, u)
		}
	}
	for _, u := range live {
		report := u.unchecked
		if report == nil {
			continue
		}
		u.unchecked = nil
		if e.reported {
			continue
		}
		for _, v := range live {
			if v != u && v.clashes(u.named) {
				e.reported = true
				go report(fmt.Errorf("%w (found after New, which collects garbage to look for a clash at most every %v)", clashError(look.id.prefix), clashLookEvery))
				break
			}
		}
	}
	if later {
		e.lookAfterGC(look.id)
	}
	r.sweep(look.id, e)
}

// ownDialer tells whether dial is a Dialer that a client's Options set,
// rather than none or go-redis's own (NewDialer's, which a client gets
// when its Options leave Dialer nil, and which dials the address it is
// given).
func ownDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) bool {
	if dial == nil {
		return false
	}
	// The function's name, not its code: NewDialer's closure has code of
	// its own wherever NewDialer is inlined.
	name := runtime.FuncForPC(reflect.ValueOf(dial).Pointer()).Name()
	return !strings.Contains(name, ".NewDialer.func")
}
