package limiter

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/behaviour"
	"github.com/gofiber/fiber/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// In an app that does not normalize header names, the limiter's fields
// come out as they do with normalized names, whatever spellings a handler
// or a middleware in front used for its own (behaviour.HeaderNameCases).
func TestHeadersWithoutNormalizing(t *testing.T) {
	serve := func(t *testing.T, normalizing bool, max int, mode HeaderMode, theirs [][2]string, inFront bool) (int, map[string][]string) {
		app := fiber.New(fiber.Config{DisableHeaderNormalizing: !normalizing})
		set := func(c fiber.Ctx) {
			for _, kv := range theirs {
				c.Response().Header.Add(kv[0], kv[1])
			}
		}
		if inFront {
			app.Use(func(c fiber.Ctx) error { set(c); return c.Next() })
		}
		app.Use(New(Config{Max: max, Expiration: time.Minute, Headers: mode}))
		app.Get("/", func(c fiber.Ctx) error {
			if !inFront {
				set(c)
			}
			return c.SendString("ok")
		})
		for i := 0; ; i++ { // with Max 1, the second request is rejected
			resp, err := app.Test(httptest.NewRequest(fiber.MethodGet, "/", nil))
			require.NoError(t, err)
			if max > 1 || i == 1 {
				return resp.StatusCode, resp.Header
			}
		}
	}
	for _, tt := range behaviour.HeaderNameCases {
		t.Run(tt.Name, func(t *testing.T) {
			status, header := serve(t, false, tt.Max, tt.Mode, tt.Theirs, tt.InFront)
			normalStatus, normalHeader := serve(t, true, tt.Max, tt.Mode, tt.Theirs, tt.InFront)
			assert.Equal(t, tt.Status, status)
			assert.Equal(t, normalStatus, status)
			for name, value := range tt.Want {
				assert.Equal(t, value, header[name], name)
				assert.Equal(t, normalHeader[name], header[name], "%s, against normalized names", name)
			}
		})
	}
}
