package quota

import (
	"testing"

	"github.com/fiberlimit/limiter/storage/redis"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client or storage that is a nil pointer of its type is set, but every
// call on it would panic: New returns an error naming the field.
func TestNewRefusesNilClientOrStorage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"nil *redis.Client as Redis", Config{Redis: (*goredis.Client)(nil)}, "Redis is a nil *redis.Client"},
		{"nil *redis.ClusterClient as Redis", Config{Redis: (*goredis.ClusterClient)(nil)}, "Redis is a nil *redis.ClusterClient"},
		{"nil storage/redis Store as Storage", Config{Storage: (*redis.Store)(nil)}, "Storage is a nil *redis.Store"},
		{"nil Storage of another kind", Config{Storage: (*faultyStorage)(nil)}, "Storage is a nil *quota.faultyStorage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Limits = []Limit{PerMinute(10)}
			var l *Limiter
			var err error
			require.NotPanics(t, func() { l, err = New(tc.cfg) })
			assert.Nil(t, l)
			assert.ErrorContains(t, err, "limiter: "+tc.field)
		})
	}
}
