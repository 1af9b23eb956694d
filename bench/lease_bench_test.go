package main

// A benchmark of Config.Lease's rows of figures 3 and 6, each variant
// alone for as long as -redistime says, so that a profile of the Go side
// (-cpuprofile, -mutexprofile, -blockprofile) shows one path at a time:
//
//	cd bench && go test -run '^$' -bench 'BenchmarkLeaseRows/ours-fixed-lease/100k' \
//	    -benchtime=1x -count=1 -cpuprofile cpu.out -mutexprofile mutex.out .
//
// Each b.N iteration is a whole measurement (it skips itself when b.N >
// 100); it reports decisions/s and, per decision, script calls and the
// µs Redis spent in them (INFO commandstats, as figure 6), Redis's
// main-thread CPU (INFO cpu) and this process's CPU (getrusage).

import (
	"context"
	"flag"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/quota"
)

var leaseBenchTime = flag.Duration("redistime", 2*time.Second, "length of one BenchmarkLeaseRows measurement")

// BenchmarkLeaseRows measures the lease rows and the same call without a
// lease, at 64 callers, on one hot key and over 100k keys in turn (a
// fresh Limiter per measurement, as in the figures).
func BenchmarkLeaseRows(b *testing.B) {
	const callers, keys = 64, 100_000
	srv := rbServer(b)
	admin := rbAdmin(b, srv)
	o := defaultOptions()
	byName := map[string]*redisVariant{}
	for _, v := range redisVariants(keys, o) {
		byName[v.name] = v
	}
	for _, name := range []string{rEngineFixed, rOursFixedLease, rEngineSliding, rOursSlidingLease, rEngineToken, rOursTokenLease} {
		v := byName[name]
		for _, many := range []bool{true, false} {
			cell := tpCell{many, callers}
			b.Run(name+"/"+cell.name(keys), func(b *testing.B) {
				redistest.MeasureOnce(b)
				var cursor atomic.Int64
				key := func() int { return keys }
				if many {
					key = func() int { return int((cursor.Add(1) - 1) % keys) }
				}
				for range b.N {
					s, err := v.open(srv, callers)
					if err != nil {
						b.Fatal(err)
					}
					st0, err := readScriptStats(admin)
					if err != nil {
						b.Fatal(err)
					}
					cpu0, err := redisCPU(admin)
					if err != nil {
						b.Fatal(err)
					}
					var ru0, ru1 syscall.Rusage
					_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
					m, err := measure(s, callers, *leaseBenchTime, keys, key)
					_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
					cpu1, _ := redisCPU(admin)
					st1, err1 := readScriptStats(admin)
					s.close()
					if err != nil || err1 != nil {
						b.Fatal(err, err1)
					}
					d := st1.since(st0)
					b.ReportMetric(m.rate, "decisions/s")
					b.ReportMetric(d.calls/float64(m.decisions), "calls/decision")
					b.ReportMetric(d.usec/float64(m.decisions), "redis-µs/decision")
					b.ReportMetric((cpu1-cpu0)*1e6/float64(m.decisions), "redis-cpu-µs/decision")
					goCPU := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
					b.ReportMetric(float64(goCPU.Microseconds())/float64(m.decisions), "go-cpu-µs/decision")
				}
			})
		}
	}
}

// mapStorage is a quota.Storage in a map under a lock: a store that
// answers at once, so that what BenchmarkLeaseColdKeysGoSide measures is
// the limiter's own work around the call.
type mapStorage struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *mapStorage) Get(key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key], nil
}

func (s *mapStorage) Set(key string, val []byte, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = append(s.m[key][:0], val...)
	return nil
}

func (s *mapStorage) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
	return nil
}

// BenchmarkLeaseColdKeysGoSide is the Go side of a take on keys that are
// never hot (100k keys in turn, one take each per pass), with and without
// Config.Lease, on a Storage that answers at once: the difference per op
// is what the lease table costs a cold key.
func BenchmarkLeaseColdKeysGoSide(b *testing.B) {
	const keys = 100_000
	names := stringKeys("cold:", keys)
	for _, lease := range []time.Duration{0, benchLease} {
		b.Run("lease="+lease.String(), func(b *testing.B) {
			l, err := quota.New(quota.Config{
				Limits: []quota.Limit{{Max: redisMax, Expiration: time.Minute}}, Storage: &mapStorage{m: map[string][]byte{}},
				FailurePolicy: quota.FailClosed, StorageTimeout: time.Minute, Lease: lease,
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				res, err := l.Take(ctx, names[i%keys], 1)
				if err != nil || !res.Allowed() {
					b.Fatal(err, res.Source())
				}
			}
		})
	}
}
