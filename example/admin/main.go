// Command admin serves a rate-limited API whose operators can see, reset
// and block a customer's quota (Limiter.Peek, Reset and Block) through an
// admin API. The two are separate apps on separate listeners: the public
// one on :3000, the admin one on 127.0.0.1:3001, which only this machine
// reaches. Keep an admin API on an internal listener (loopback, a private
// network, behind your VPN) and behind authentication, both: it can lift
// any customer's limit.
//
// The admin API wants a bearer token from ADMIN_TOKEN (at least 16
// characters; the command refuses to start without one), read from the
// environment rather than a flag so that it stays out of ps. The limiter
// keeps its counts in memory, or in Redis when REDIS_URL is set, where a
// Reset or a Block made through one replica holds on every replica within
// a second.
//
//	export ADMIN_TOKEN=$(openssl rand -hex 32)
//	go run ./example/admin
//	for i in $(seq 6); do curl -s -o /dev/null -w '%{http_code}\n' -H 'X-API-Key: demo-key-acme' http://127.0.0.1:3000/api/hello; done
//	curl -s -H "Authorization: Bearer $ADMIN_TOKEN" http://127.0.0.1:3001/admin/limits/acme
//	curl -s -X DELETE -H "Authorization: Bearer $ADMIN_TOKEN" http://127.0.0.1:3001/admin/limits/acme
//	curl -s -X POST -H "Authorization: Bearer $ADMIN_TOKEN" 'http://127.0.0.1:3001/admin/limits/acme/block?for=1h'
package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/fiberlimit/limiter/quota"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
)

const (
	// apiKeyHeader carries a customer's API key on the public API.
	apiKeyHeader = "X-API-Key"
	// minTokenLen is the shortest admin token accepted.
	minTokenLen = 16
	// maxHold is the longest block the admin API accepts, as Block does.
	maxHold = 365 * 24 * time.Hour
)

// customers maps each API key to the customer it belongs to. A real app
// looks keys up in its own store. The limiter counts under the customer's
// name, not under the key: the key is a secret, and would otherwise sit in
// Redis's key names and in the admin API's URLs and logs.
var customers = map[string]string{
	"demo-key-acme":   "acme",
	"demo-key-globex": "globex",
}

// limits are each customer's: 5 requests a minute and 100 an hour.
var limits = []limiter.Limit{
	{Max: 5, Expiration: time.Minute},
	{Max: 100, Expiration: time.Hour},
}

func main() {
	addr := flag.String("addr", ":3000", "address of the public API")
	adminAddr := flag.String("admin-addr", "127.0.0.1:3001", "address of the admin API: keep it internal")
	flag.Parse()

	var store fiber.Storage // nil: in memory
	if u := os.Getenv("REDIS_URL"); u != "" {
		s, err := openRedis(context.Background(), u)
		if err != nil {
			log.Fatal(err)
		}
		store = s
	}
	srv, err := newServer(os.Getenv("ADMIN_TOKEN"), store)
	if err != nil {
		log.Fatal(err)
	}
	errc := make(chan error, 2)
	go func() { errc <- srv.public.Listen(*addr) }()
	go func() { errc <- srv.admin.Listen(*adminAddr) }()
	log.Printf("public API on %s, admin API on %s", *addr, *adminAddr)
	log.Fatal(<-errc)
}

// server is the public app and the admin app, sharing one limiter.
type server struct {
	public *fiber.App
	admin  *fiber.App
}

// newServer builds both apps around one limiter over store (in memory when
// nil). It returns an error when token is shorter than minTokenLen: the
// admin API is never served open.
func newServer(token string, store fiber.Storage) (*server, error) {
	if len(token) < minTokenLen {
		return nil, fmt.Errorf("limiter: admin example: ADMIN_TOKEN must be set to at least %d characters (openssl rand -hex 32 makes one)", minTokenLen)
	}
	l := limiter.NewLimiter(limiter.Config{
		Name:   "api",
		Limits: limits,
		// authenticate has run: the request belongs to a customer.
		KeyGenerator: func(c *fiber.Ctx) string {
			customer, _ := c.Locals(customerKey{}).(string)
			return customer
		},
		Storage: store,
	})

	public := fiber.New(fiber.Config{DisableStartupMessage: true})
	api := public.Group("/api", authenticate, l.Handler())
	api.Get("/hello", func(c *fiber.Ctx) error {
		customer, _ := c.Locals(customerKey{}).(string)
		return c.SendString("hello, " + customer + "\n")
	})

	ops := operators{l: l}
	admin := fiber.New(fiber.Config{DisableStartupMessage: true})
	limitsAPI := admin.Group("/admin", requireToken(token)).Group("/limits/:customer", ops.customer)
	limitsAPI.Get("", ops.peek)
	limitsAPI.Delete("", ops.reset)
	limitsAPI.Post("/block", ops.block)
	return &server{public: public, admin: admin}, nil
}

// customerKey is the Locals key of the request's customer.
type customerKey struct{}

// authenticate finds the customer of the request's API key, or answers
// 401.
func authenticate(c *fiber.Ctx) error {
	customer, ok := customers[c.Get(apiKeyHeader)]
	if !ok {
		return c.Status(fiber.StatusUnauthorized).JSON(errorBody{Error: "a valid " + apiKeyHeader + " header is required"})
	}
	c.Locals(customerKey{}, customer)
	return c.Next()
}

// requireToken admits a request whose Authorization is "Bearer " and
// token, and answers any other 401. The tokens are compared by their
// SHA-256 in constant time, so that the time taken tells nothing of the
// token, not even its length.
func requireToken(token string) fiber.Handler {
	want := sha256.Sum256([]byte(token))
	return func(c *fiber.Ctx) error {
		scheme, given, ok := strings.Cut(c.Get(fiber.HeaderAuthorization), " ")
		got := sha256.Sum256([]byte(given))
		if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="admin"`)
			return c.Status(fiber.StatusUnauthorized).JSON(errorBody{Error: "a valid bearer token is required"})
		}
		return c.Next()
	}
}

// operators serves the admin API over l.
type operators struct {
	l *limiter.Limiter
}

// customer checks the :customer of the path and keeps it for the handler:
// an unknown name is 404, so that a typo does not "reset" nobody.
func (o operators) customer(c *fiber.Ctx) error {
	name, err := url.PathUnescape(c.Params("customer"))
	if err != nil || !knownCustomer(name) {
		return c.Status(fiber.StatusNotFound).JSON(errorBody{Error: "no such customer"})
	}
	c.Locals(customerKey{}, name)
	return c.Next()
}

// peek answers GET /admin/limits/:customer: the customer's state, counting
// nothing.
func (o operators) peek(c *fiber.Ctx) error {
	customer, _ := c.Locals(customerKey{}).(string)
	st, err := o.l.Peek(c.UserContext(), customer)
	if err != nil {
		return storeFailed(c, err)
	}
	return c.JSON(viewOf(customer, &st))
}

// reset answers DELETE /admin/limits/:customer: the customer's counts and
// block are forgotten.
func (o operators) reset(c *fiber.Ctx) error {
	customer, _ := c.Locals(customerKey{}).(string)
	if err := o.l.Reset(c.UserContext(), customer); err != nil {
		return storeFailed(c, err)
	}
	log.Printf("admin: reset %s", customer)
	return c.SendStatus(fiber.StatusNoContent)
}

// block answers POST /admin/limits/:customer/block?for=1h: the customer is
// rejected for that long whatever their counts, until a reset lifts it.
func (o operators) block(c *fiber.Ctx) error {
	customer, _ := c.Locals(customerKey{}).(string)
	d, err := parseHold(c.Query("for"))
	if err != nil {
		return c.Status(fiber.StatusBadRequest).JSON(errorBody{Error: err.Error()})
	}
	st, err := o.l.Block(c.UserContext(), customer, d)
	if err != nil {
		return storeFailed(c, err)
	}
	log.Printf("admin: blocked %s for %v", customer, d)
	return c.JSON(viewOf(customer, &st))
}

// parseHold reads the for parameter of a block: a Go duration (90s, 30m,
// 1h30m) or a whole number of days (7d), above 0 and at most 365 days.
func parseHold(s string) (time.Duration, error) {
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		n, err = strconv.Atoi(days)
		if n > 365 {
			n = 366 // beyond maxHold, and no overflow below
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(s)
	}
	switch {
	case s == "":
		return 0, errors.New("for is required: a duration such as 30m, 1h or 7d")
	case err != nil:
		return 0, fmt.Errorf("for=%q is not a duration such as 30m, 1h or 7d", s)
	case d <= 0 || d > maxHold:
		return 0, fmt.Errorf("for=%q is out of range: above 0 and at most 365d (a reset lifts a block)", s)
	}
	return d, nil
}

// storeFailed answers 503 for an operator's call that the limiter's store
// did not answer, and logs why; the input was checked before the call.
func storeFailed(c *fiber.Ctx, err error) error {
	log.Printf("admin: %s %s: %v", c.Method(), c.Path(), err)
	return c.Status(fiber.StatusServiceUnavailable).JSON(errorBody{Error: "the limiter's store did not answer; try again"})
}

// knownCustomer reports whether name is one of customers' names.
func knownCustomer(name string) bool {
	for _, n := range customers {
		if n == name {
			return true
		}
	}
	return false
}

// errorBody is the JSON of an error answer.
type errorBody struct {
	Error string `json:"error"`
}

// statusView is the JSON of a customer's state (quota.Status).
type statusView struct {
	Customer string `json:"customer"`
	// Allowed reports whether the customer's next request would be
	// admitted now.
	Allowed bool `json:"allowed"`
	// Blocked reports whether something holds the customer off whatever
	// their counts (a block), for HeldMS.
	Blocked bool  `json:"blocked"`
	HeldMS  int64 `json:"held_ms"`
	// RetryAfterMS is how long until the next request would be admitted:
	// 0 when it would be now, null when never.
	RetryAfterMS *int64      `json:"retry_after_ms"`
	Limits       []limitView `json:"limits"`
}

// limitView is the JSON of the customer's state under one limit
// (quota.Decision). RetryAfterMS is 0 when this limit would admit the
// next request (the others may not: see statusView.Allowed).
type limitView struct {
	Limit        int    `json:"limit"`
	WindowMS     int64  `json:"window_ms"`
	Remaining    int    `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS *int64 `json:"retry_after_ms"`
}

// viewOf is the JSON of customer's st.
func viewOf(customer string, st *quota.Status) statusView {
	v := statusView{
		Customer:     customer,
		Allowed:      st.Allowed(),
		Blocked:      st.Blocked(),
		HeldMS:       st.Held.Milliseconds(),
		RetryAfterMS: millis(st.RetryAfter()),
	}
	for _, d := range st.Decisions() {
		v.Limits = append(v.Limits, limitView{
			Limit:        d.Limit,
			WindowMS:     d.Window.Milliseconds(),
			Remaining:    d.Remaining,
			ResetAfterMS: d.ResetAfter.Milliseconds(),
			RetryAfterMS: millis(d.RetryAfter),
		})
	}
	return v
}

// millis is d in ms, nil for quota.Never.
func millis(d time.Duration) *int64 {
	if d == quota.Never {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

// openRedis connects to rawURL (redis://host:port/db or rediss://...) and
// pings it, so that a wrong REDIS_URL stops the command at start.
func openRedis(ctx context.Context, rawURL string) (*redis.Store, error) {
	opts, err := goredis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("limiter: admin example: REDIS_URL: %w", err)
	}
	// Lets a call end at the limiter's StorageTimeout by itself.
	opts.ContextTimeoutEnabled = true
	client := goredis.NewClient(opts)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("limiter: admin example: cannot reach Redis at %s: %w", opts.Addr, err)
	}
	return redis.New(client), nil
}
