package limiter

import (
	"testing"

	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v3"
	"github.com/stretchr/testify/assert"
)

// A Storage that is a nil pointer of its type panics at New, naming the
// field, not at the first request.
func TestNewPanicsOnNilStorage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		storage fiber.Storage
		want    string
	}{
		{"nil storage/redis Store", (*redis.Store)(nil), "limiter: Storage is a nil *redis.Store"},
		{"nil Storage of another kind", (*nilFiberStorage)(nil), "limiter: Storage is a nil *limiter.nilFiberStorage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tc.want+"; make it with its package's New, or leave Storage unset", func() {
				New(Config{Storage: tc.storage})
			})
		})
	}
}

type nilFiberStorage struct{ fiber.Storage }
