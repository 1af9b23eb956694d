package redis

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// The methods below make a Store a fiber.Storage of Fiber v2 and v3 (the
// latter with the context methods), so that it can be given to a
// middleware's Config.Storage like any Fiber storage. The limiter decides
// through the Store's scripts, not through these.

// Get returns the value of key, or nil when there is none.
func (s *Store) Get(key string) ([]byte, error) {
	return s.GetWithContext(context.Background(), key)
}

// GetWithContext is Get under ctx.
func (s *Store) GetWithContext(ctx context.Context, key string) ([]byte, error) {
	v, err := s.client.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

// Set stores val under key for exp (no expiry when exp is 0).
func (s *Store) Set(key string, val []byte, exp time.Duration) error {
	return s.SetWithContext(context.Background(), key, val, exp)
}

// SetWithContext is Set under ctx.
func (s *Store) SetWithContext(ctx context.Context, key string, val []byte, exp time.Duration) error {
	return s.client.Set(ctx, key, val, exp).Err()
}

// Delete removes key.
func (s *Store) Delete(key string) error {
	return s.DeleteWithContext(context.Background(), key)
}

// DeleteWithContext is Delete under ctx.
func (s *Store) DeleteWithContext(ctx context.Context, key string) error {
	return s.client.Del(ctx, key).Err()
}

// errReset is what Reset returns.
var errReset = errors.New("limiter: redis Store.Reset does not run FLUSHDB: the database may hold more than the limiter's keys; to flush it, call Conn().FlushDB")

// Reset removes nothing and returns an error. fiber.Storage's Reset
// removes every key of the storage, which for a Redis storage is FLUSHDB:
// on a limiter's handle, whose database may hold other data (sessions, a
// cache), that is a trap. To flush the database, call Conn().FlushDB.
func (s *Store) Reset() error {
	return errReset
}

// ResetWithContext is Reset: it removes nothing and returns an error.
func (s *Store) ResetWithContext(context.Context) error {
	return errReset
}

// Close closes the client.
func (s *Store) Close() error {
	return s.client.Close()
}
