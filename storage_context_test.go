package limiter

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/behaviour"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
)

// The context a Fiber app sets on the request (c.SetUserContext) reaches
// every call of a Storage with the context methods (as some of Fiber v2's
// storages have), with its values and cancellation and the
// StorageTimeout deadline: one Get and one Set for the take, one of each
// for the refund of a successful request. A request whose context an
// earlier middleware canceled still reaches the store, and the store
// deciding it is admitted.
func TestStorageGetsFiberRequestContext(t *testing.T) {
	for name, mw := range map[string]LimiterHandler{"FixedWindow": FixedWindow{}, "SlidingWindow": SlidingWindow{}} {
		t.Run(name, func(t *testing.T) {
			store := behaviour.NewContextStorage(t)
			app := fiber.New()
			app.Use(func(c *fiber.Ctx) error {
				ctx := context.WithValue(context.Background(), behaviour.RequestMark{}, c.Path())
				if c.Path() == "/canceled" {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					cancel()
				}
				c.SetUserContext(ctx)
				return c.Next()
			})
			app.Use(New(Config{
				Storage: store, Max: 1, Expiration: time.Minute, SkipSuccessfulRequests: true,
				KeyGenerator:      func(c *fiber.Ctx) string { return c.Path() },
				LimiterMiddleware: mw,
			}))
			app.Get("/:mode", func(c *fiber.Ctx) error { return c.SendString("ok") })

			for _, path := range []string{"/normal", "/canceled"} {
				resp, err := app.Test(httptest.NewRequest(fiber.MethodGet, path, http.NoBody), -1)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode, path)
			}
			store.CheckVisits(t, "/normal", "/canceled")
		})
	}
}
