package redis

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// The methods below make a Store a fiber.Storage as well, so that it can be
// given to the limiter's Config.Storage like any Fiber storage. The limiter
// itself only uses Take and Refund, found through Conn.

// Get returns the value of key, or nil when there is none.
func (s *Store) Get(key string) ([]byte, error) {
	v, err := s.client.Get(context.Background(), key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

// Set stores val under key for exp (no expiry when exp is 0).
func (s *Store) Set(key string, val []byte, exp time.Duration) error {
	return s.client.Set(context.Background(), key, val, exp).Err()
}

// Delete removes key.
func (s *Store) Delete(key string) error {
	return s.client.Del(context.Background(), key).Err()
}

// Reset removes every key of the current database (FLUSHDB), as Fiber's
// Redis storage does.
func (s *Store) Reset() error {
	return s.client.FlushDB(context.Background()).Err()
}

// Close closes the client.
func (s *Store) Close() error {
	return s.client.Close()
}
