package quota

import (
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// faultyStorage is a Storage in a map whose calls the test makes fail, as
// a store out of reach does (a network error), hang until the test ends,
// or panic. It counts the calls that reached it: a take, an adjustment
// and the breaker's probe each begin with a Get.
type faultyStorage struct {
	mapStorage
	mode    atomic.Int32 // storeUp, storeDown, storeHung or storePanics
	hangKey string       // a client key whose calls hang whatever the mode
	gets    atomic.Int64
	release chan struct{} // closed when the test ends: hung calls return
	once    sync.Once
}

const (
	storeUp int32 = iota
	storeDown
	storeHung
	storePanics
)

// errStoreDown is the error of every call while a faultyStorage is down:
// a connection reset, which says the store is out of reach.
var errStoreDown = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}

func newFaultyStorage(t *testing.T) *faultyStorage {
	s := &faultyStorage{mapStorage: mapStorage{m: map[string][]byte{}}, release: make(chan struct{})}
	t.Cleanup(func() { s.once.Do(func() { close(s.release) }) })
	return s
}

func (s *faultyStorage) fail(key string) error {
	mode := s.mode.Load()
	if mode == storeHung || s.hangKey != "" && strings.HasSuffix(key, ":"+s.hangKey) {
		<-s.release
		return errStoreDown
	}
	switch mode {
	case storeDown:
		return errStoreDown
	case storePanics:
		panic("storage bug")
	}
	return nil
}

func (s *faultyStorage) Get(key string) ([]byte, error) {
	s.gets.Add(1)
	if err := s.fail(key); err != nil {
		return nil, err
	}
	return s.mapStorage.Get(key)
}

func (s *faultyStorage) Set(key string, val []byte, exp time.Duration) error {
	if err := s.fail(key); err != nil {
		return err
	}
	return s.mapStorage.Set(key, val, exp)
}

func (s *faultyStorage) Delete(key string) error {
	if err := s.fail(key); err != nil {
		return err
	}
	return s.mapStorage.Delete(key)
}

// storageErrors collects what Config.OnStorageError is told.
type storageErrors struct {
	mu   sync.Mutex
	errs []error
}

func (r *storageErrors) hook(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *storageErrors) all() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}
