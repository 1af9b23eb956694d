package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/fiberlimit/limiter/nethttp"
)

// A token bucket that rejects with 503 while its store fails, configured
// with this package's names alone.
func ExampleNew() {
	limit := nethttp.New(nethttp.Config{
		Max:           2,
		Expiration:    time.Minute,
		Algorithm:     nethttp.TokenBucket,
		FailurePolicy: nethttp.FailClosed,
		Headers:       nethttp.HeadersIETF,
	})
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	for range 3 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "default";r=1;t=30
	// 200 "default";r=0;t=60
	// 429 "default";r=0;t=30
}
