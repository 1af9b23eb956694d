package redistest

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

// ErrNoServer is returned by StartForMain when there is no redis-server
// binary and LIMITER_REQUIRE_REDIS is not 1.
var ErrNoServer = errors.New("redistest: no redis-server binary")

// StartForMain starts a redis-server outside of any test, for a TestMain
// (examples cannot start one themselves). stop kills it and removes its
// directory. Without a binary it returns ErrNoServer, or another error
// when LIMITER_REQUIRE_REDIS=1.
func StartForMain() (s *Server, stop func(), err error) {
	tb := &mainTB{}
	defer func() {
		if p := recover(); p != nil {
			tb.cleanup()
			if sk, ok := p.(skipped); ok {
				s, stop, err = nil, nil, fmt.Errorf("%w: %s", ErrNoServer, string(sk))
				return
			}
			s, stop, err = nil, nil, fmt.Errorf("redistest: %v", p)
		}
	}()
	s = Start(tb)
	return s, tb.cleanup, nil
}

// mainTB is the part of testing.TB that Start uses, outside of a test:
// failures and skips panic, and cleanups run when stopped.
type mainTB struct {
	testing.TB // nil: a method not defined here would panic
	cleanups   []func()
}

// skipped is the panic of Skipf.
type skipped string

func (m *mainTB) Helper()                         {}
func (m *mainTB) Fatal(args ...any)               { panic(fmt.Sprint(args...)) }
func (m *mainTB) Fatalf(format string, a ...any)  { panic(fmt.Sprintf(format, a...)) }
func (m *mainTB) Skipf(format string, a ...any)   { panic(skipped(fmt.Sprintf(format, a...))) }
func (m *mainTB) Cleanup(f func())                { m.cleanups = append(m.cleanups, f) }
func (m *mainTB) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func (m *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		panic(err)
	}
	m.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// cleanup runs the cleanups, last first, once.
func (m *mainTB) cleanup() {
	for i := len(m.cleanups) - 1; i >= 0; i-- {
		m.cleanups[i]()
	}
	m.cleanups = nil
}
