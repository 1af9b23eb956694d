// Package adapter is what the middleware adapters (Fiber v2, Fiber v3,
// net/http) share between them: their common settings, checked once with
// the same messages, and turned into the engine (a quota.Limiter) and the
// header writer. An adapter maps its own Config onto Settings, and keeps
// only its framework's part: the request, the response, the handler chain.
package adapter

import (
	"errors"
	"fmt"
	"log"
	"math"
	"reflect"
	"time"

	"github.com/fiberlimit/limiter/internal/clientaddr"
	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/quota"
	goredis "github.com/redis/go-redis/v9"
)

// Limit is one entry of an adapter's Config.Limits.
type Limit struct {
	Max        int
	Expiration time.Duration
	Burst      int
	PolicyName string
}

// Settings are the fields every adapter's Config has, by the same names,
// with the adapter's defaults for Max and Expiration applied.
type Settings struct {
	Algorithm quota.Algorithm
	// Concurrency: the limiter caps a key's requests in flight (Max of
	// them, each slot held at most Expiration) instead of a rate;
	// Algorithm is not read.
	Concurrency    bool
	Max            int
	Expiration     time.Duration
	Burst          int
	Limits         []Limit
	MaxFunc        bool // the adapter's MaxFunc is set
	ExpirationFunc bool // the adapter's ExpirationFunc is set (Fiber v3)
	IdempotencyKey bool // the adapter's IdempotencyKey is set
	Cost           bool // the adapter's Cost is set
	IPv6Prefix     int

	// Storage is the adapter's Storage: nil, a go-redis client (for
	// quota.Config.Redis), or a quota.Storage, which quota decides in Redis
	// when it sits on go-redis (has Conn()).
	Storage any

	Name, KeyPrefix  string
	MaxKeys          int
	BlockFor         time.Duration
	MinInterval      time.Duration
	Lease            time.Duration
	MaxDelay         time.Duration
	MaxWaiting       int
	FailurePolicy    quota.FailurePolicy
	StorageTimeout   time.Duration
	BreakerFailures  int
	BreakerCooldown  time.Duration
	OnStorageError   func(error)
	DenyCacheKeys    int
	DisableDenyCache bool
	IdempotencyTTL   time.Duration
	IdempotencyKeys  int

	DryRun                 bool
	SkipFailedRequests     bool
	SkipSuccessfulRequests bool

	Headers            headers.Mode
	DisableHeaders     bool
	PolicyName         string
	HeaderPartitionKey bool

	Clock func() int64 // tests: the clock in ms

	// skipRedisCheck builds without quota's call to Redis at New (see
	// MustBuild).
	skipRedisCheck bool
}

// shared are the fields of Settings that every adapter's Config has by the
// same name and type; CopyFrom copies them.
var shared = []string{
	"Max", "Expiration", "Burst", "IPv6Prefix", "Name", "KeyPrefix", "MaxKeys", "BlockFor", "MinInterval",
	"Lease", "MaxDelay", "MaxWaiting", "FailurePolicy", "StorageTimeout", "BreakerFailures", "BreakerCooldown", "OnStorageError",
	"DenyCacheKeys", "DisableDenyCache", "IdempotencyTTL", "IdempotencyKeys",
	"Headers", "DisableHeaders", "PolicyName", "HeaderPartitionKey",
	"DryRun", "SkipFailedRequests", "SkipSuccessfulRequests",
}

// CopyFrom sets the shared fields of s from cfg, a pointer to an
// adapter's Config, which has each of them by the same name and type: one
// mapping for every adapter, made once at New. A Storage that is set and
// the Limits (a slice of structs with Limit's fields) are copied too. It
// panics if cfg lacks a shared field.
func (s *Settings) CopyFrom(cfg any) {
	from := reflect.ValueOf(cfg).Elem()
	to := reflect.ValueOf(s).Elem()
	for _, name := range shared {
		f := from.FieldByName(name)
		if !f.IsValid() {
			panic(fmt.Sprintf("limiter: %T has no field %s", cfg, name))
		}
		to.FieldByName(name).Set(f)
	}
	if f := from.FieldByName("Storage"); f.IsValid() && !f.IsNil() {
		s.Storage = f.Interface()
	}
	if f := from.FieldByName("Limits"); f.IsValid() {
		for i := range f.Len() {
			s.Limits = append(s.Limits, f.Index(i).Convert(reflect.TypeFor[Limit]()).Interface().(Limit))
		}
	}
}

// MustBuild copies the shared fields of cfg (a pointer to an adapter's
// Config) into s, which holds the adapter's own, and returns the request
// path they describe. It panics with the message of an invalid field. A
// Redis that answers but refuses the limiter (quota.ErrRedisRefused: a
// wrong password, say) is no panic: an app must not crash-loop while its
// Redis is being put right; the refusal is logged, once, and the path is
// built all the same, its requests answered by FailurePolicy (and logged
// as failed calls are) until Redis accepts the client.
func MustBuild(cfg any, s Settings) *Path {
	s.CopyFrom(cfg)
	p, err := s.Build()
	if errors.Is(err, quota.ErrRedisRefused) {
		log.Print(err)
		s.skipRedisCheck = true
		p, err = s.Build()
	}
	if err != nil {
		panic(err.Error())
	}
	return p
}

// Check checks the settings that are the adapters' own (the engine checks
// the rest) and returns the first error, naming the field.
func (s *Settings) Check() error {
	for _, f := range [...]struct {
		name string
		v    int
	}{{"Max", s.Max}, {"Burst", s.Burst}} {
		switch {
		case f.v < 0:
			return fmt.Errorf("limiter: %s is %d; it must be >= 0 (0 means the default)", f.name, f.v)
		case int64(f.v) > math.MaxUint32:
			return fmt.Errorf("limiter: %s is %d; it must be at most %d (below 2^32)", f.name, f.v, int64(math.MaxUint32))
		}
	}
	if s.IPv6Prefix < 0 || s.IPv6Prefix > 128 {
		return fmt.Errorf("limiter: IPv6Prefix is %d; it must be 0 (the default, %d) to 128 (each address on its own)", s.IPv6Prefix, clientaddr.DefaultIPv6Prefix)
	}
	if d := s.Expiration; d < 0 || (d > 0 && d < time.Millisecond) {
		return fmt.Errorf("limiter: Expiration is %v; it must be 0 (default %v) or at least 1ms", d, quota.DefaultExpiration)
	}
	if len(s.Limits) > 0 {
		switch {
		case s.MaxFunc:
			return errors.New("limiter: Limits and MaxFunc are both set; MaxFunc sets the Max of a single limit: use Max and Expiration with it, or Limits without it")
		case s.ExpirationFunc:
			return errors.New("limiter: Limits and ExpirationFunc are both set; ExpirationFunc sets the Expiration of a single limit: use Max and Expiration with it, or Limits without it")
		case s.Burst != 0:
			return fmt.Errorf("limiter: Limits is set, and so is Burst (%d); set each limit's Burst in Limits", s.Burst)
		}
	}
	if s.IdempotencyKey && (s.MaxFunc || s.ExpirationFunc) {
		return errors.New("limiter: IdempotencyKey is set with MaxFunc or ExpirationFunc; a repeated request gets its first decision, made under the configured limits: use one or the other")
	}
	if s.Lease > 0 && (s.MaxFunc || s.ExpirationFunc) {
		return errors.New("limiter: Lease is set with MaxFunc or ExpirationFunc; a share of a client's quota is taken under one limit: use fixed limits (Max, Expiration or Limits) with Lease")
	}
	if s.Lease > 0 && s.Algorithm == quota.TokenBucket && (s.SkipFailedRequests || s.SkipSuccessfulRequests) {
		return errors.New("limiter: Lease is set with TokenBucket and SkipFailedRequests or SkipSuccessfulRequests; a token bucket with leases gives nothing back (docs/leases.md): use a window, or no Lease")
	}
	if err := s.checkDelay(); err != nil {
		return err
	}
	if s.Algorithm == quota.SlidingLog && len(s.Limits) == 0 && s.Max > quota.MaxLogLimit {
		return fmt.Errorf("limiter: Max is %d; SlidingLog keeps one entry per unit of Max and takes at most %d (for larger limits, SlidingWindow estimates the same window in two counters)", s.Max, quota.MaxLogLimit)
	}
	if s.Algorithm == quota.SlidingLog && s.MaxFunc {
		return errors.New("limiter: MaxFunc is set with SlidingLog, whose keys keep one entry per unit of Max; give each Max its own limiter, or use another algorithm")
	}
	if s.Algorithm != quota.TokenBucket {
		field, burst := "Burst", s.Burst
		for i, l := range s.Limits {
			if l.Burst > 0 {
				field, burst = fmt.Sprintf("Limits[%d].Burst", i), l.Burst
			}
		}
		if burst > 0 {
			return fmt.Errorf("limiter: %s is %d but only TokenBucket uses it; remove it or use TokenBucket{}", field, burst)
		}
	}
	return nil
}

// checkDelay checks MaxDelay and MaxWaiting against the rest (the
// engine checks MaxDelay's bound, see Build).
func (s *Settings) checkDelay() error {
	if err := s.checkWaiting(); err != nil || s.MaxDelay == 0 {
		return err
	}
	if with := s.firstSet("MaxFunc", "ExpirationFunc", "IdempotencyKey", "Lease", "BlockFor", "MinInterval"); with != "" {
		return fmt.Errorf("limiter: MaxDelay is set with %s; a turn is counted under fixed limits, decided in the store, with no block or gap: use one or the other", with)
	}
	return nil
}

// checkWaiting checks MaxDelay and MaxWaiting on their own.
func (s *Settings) checkWaiting() error {
	if s.MaxDelay < 0 {
		return fmt.Errorf("limiter: MaxDelay is %v; it must be 0 (none) or above", s.MaxDelay)
	}
	if s.MaxWaiting < 0 {
		return fmt.Errorf("limiter: MaxWaiting is %d; it must be >= 0 (0 means the default, %d)", s.MaxWaiting, quota.DefaultMaxWaiting)
	}
	return nil
}

// firstSet returns the first of names, fields of s that a limiter may
// leave unset, that is set; "" when none is.
func (s *Settings) firstSet(names ...string) string {
	set := map[string]bool{
		"SkipFailedRequests": s.SkipFailedRequests, "SkipSuccessfulRequests": s.SkipSuccessfulRequests,
		"MaxFunc": s.MaxFunc, "ExpirationFunc": s.ExpirationFunc, "IdempotencyKey": s.IdempotencyKey, "Cost": s.Cost,
		"Limits": len(s.Limits) > 0, "Burst": s.Burst != 0, "Lease": s.Lease > 0, "BlockFor": s.BlockFor > 0, "MinInterval": s.MinInterval > 0,
	}
	for _, name := range names {
		if set[name] {
			return name
		}
	}
	return ""
}

// Build checks the settings and returns the request path they describe:
// the engine and the header writer.
func (s *Settings) Build() (*Path, error) {
	if s.Concurrency {
		return s.buildSlots()
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	qc := quota.Config{
		Algorithm:        s.Algorithm,
		Limits:           s.EngineLimits(),
		VaryMax:          s.MaxFunc,
		VaryExpiration:   s.ExpirationFunc,
		Name:             s.Name,
		KeyPrefix:        s.KeyPrefix,
		MaxKeys:          s.MaxKeys,
		BlockFor:         s.BlockFor,
		MinInterval:      s.MinInterval,
		Lease:            s.Lease,
		FailurePolicy:    s.FailurePolicy,
		StorageTimeout:   s.StorageTimeout,
		BreakerFailures:  s.BreakerFailures,
		BreakerCooldown:  s.BreakerCooldown,
		OnStorageError:   s.OnStorageError,
		DenyCacheKeys:    s.DenyCacheKeys,
		DisableDenyCache: s.DisableDenyCache,
		IdempotencyTTL:   s.IdempotencyTTL,
		IdempotencyKeys:  s.IdempotencyKeys,
		MaxWaiting:       s.MaxWaiting,

		DisableRedisCheck: s.skipRedisCheck,
	}
	if clock := s.Clock; clock != nil {
		qc.Now = func() time.Time { return time.UnixMilli(clock()) }
	}
	if s.Storage != nil {
		if v := reflect.ValueOf(s.Storage); v.Kind() == reflect.Pointer && v.IsNil() {
			field := "Storage"
			if _, ok := s.Storage.(goredis.UniversalClient); ok {
				field = "Redis" // net/http's field for a client
			}
			return nil, fmt.Errorf("limiter: %s is a nil %T; make it with its package's New, or leave %s unset", field, s.Storage, field)
		}
	}
	switch st := s.Storage.(type) {
	case nil:
	case goredis.UniversalClient:
		qc.Redis = st
	case quota.Storage:
		qc.Storage = redisengine.Handed{Storage: st}
	default:
		return nil, fmt.Errorf("limiter: Storage is a %T, which is neither a go-redis client nor has Get, Set and Delete", st)
	}
	engine, err := quota.New(qc)
	if err != nil {
		return nil, err
	}
	if s.MaxDelay > 0 {
		if err := engine.CheckReserve(s.MaxDelay); err != nil {
			return nil, fmt.Errorf("limiter: MaxDelay: %w", err)
		}
	}
	var hl []headers.Limit
	quotas := []int{s.Max, s.Burst}
	for _, l := range s.Limits {
		hl = append(hl, headers.Limit{Expiration: l.Expiration, PolicyName: l.PolicyName})
		quotas = append(quotas, l.Max, l.Burst)
	}
	w, err := headers.New(headers.Config{
		Mode:           s.Headers,
		DisableHeaders: s.DisableHeaders,
		PartitionKey:   s.HeaderPartitionKey,
		PolicyName:     s.PolicyName,
		Limits:         hl,
		Quotas:         quotas,
	})
	if err != nil {
		return nil, err
	}
	return &Path{
		Engine:     engine,
		Headers:    w,
		Memory:     s.Storage == nil,
		DryRun:     s.DryRun,
		SkipFailed: s.SkipFailedRequests,
		SkipOK:     s.SkipSuccessfulRequests,
		MaxDelay:   s.MaxDelay,
	}, nil
}

// EngineLimits are the engine's limits: Limits, or Max per Expiration
// with Burst.
func (s *Settings) EngineLimits() []quota.Limit {
	if len(s.Limits) == 0 {
		return []quota.Limit{{Max: s.Max, Expiration: s.Expiration, Burst: s.Burst}}
	}
	ls := make([]quota.Limit, len(s.Limits))
	for i, l := range s.Limits {
		ls[i] = quota.Limit{Max: l.Max, Expiration: l.Expiration, Burst: l.Burst}
	}
	return ls
}
