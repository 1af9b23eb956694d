package quota_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fiberlimit/limiter/quota"
	"github.com/redis/go-redis/v9"
)

// A limit of 3 per minute for each key, kept in this process.
func Example() {
	limiter, err := quota.New(quota.Config{Limits: []quota.Limit{quota.PerMinute(3)}})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		res, _ := limiter.Take(ctx, "user:42", 1)
		if res.Allowed() {
			fmt.Println("allowed, remaining", res.Tightest().Remaining)
		} else {
			fmt.Println("rejected, retry in", res.RetryAfter().Round(time.Minute))
		}
	}
	// Output:
	// allowed, remaining 2
	// allowed, remaining 1
	// allowed, remaining 0
	// rejected, retry in 1m0s
}

// Several limits decided as one: a burst of 2 a second, and 100 an hour.
// A take one limit rejects counts under none.
func Example_severalLimits() {
	limiter, _ := quota.New(quota.Config{
		Algorithm: quota.TokenBucket,
		Limits:    []quota.Limit{quota.PerSecond(2), quota.PerHour(100)},
	})
	ctx := context.Background()
	for range 3 {
		res, _ := limiter.Take(ctx, "api-key-7", 1)
		hourly := res.Decisions()[1]
		fmt.Println(res.Allowed(), "hourly remaining", hourly.Remaining)
	}
	// Output:
	// true hourly remaining 99
	// true hourly remaining 98
	// false hourly remaining 98
}

// On Redis, every process sharing the server admits exactly the limit
// between them: each take is one atomic script call.
func Example_redis() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	limiter, err := quota.New(quota.Config{
		Limits: []quota.Limit{{Max: 100, Expiration: time.Minute}},
		Redis:  client,
	})
	if err != nil {
		panic(err)
	}
	res, _ := limiter.Take(context.Background(), "user:42", 1)
	fmt.Println(res.Allowed())
}

// A quota per plan: TakeWith sets the Max of one take.
func ExampleLimiter_TakeWith() {
	limiter, _ := quota.New(quota.Config{Limits: []quota.Limit{quota.PerMinute(10)}, VaryMax: true})
	plans := map[string]int{"free": 1, "pro": 1000}
	ctx := context.Background()
	for _, plan := range []string{"free", "free", "pro"} {
		res, _ := limiter.TakeWith(ctx, "user:"+plan, 1, quota.Limit{Max: plans[plan]})
		fmt.Println(plan, res.Allowed(), res.Tightest().Limit)
	}
	// Output:
	// free true 1
	// free false 1
	// pro true 1000
}

// A take whose work failed gives its cost back.
func ExampleLimiter_Refund() {
	limiter, _ := quota.New(quota.Config{Limits: []quota.Limit{quota.PerMinute(1)}})
	ctx := context.Background()
	res, _ := limiter.Take(ctx, "job", 1)
	fmt.Println(res.Allowed(), res.Tightest().Remaining)
	res, _ = limiter.Refund(ctx, "job", 1, &res) // the job failed: no charge
	fmt.Println(res.Tightest().Remaining)
	res, _ = limiter.Take(ctx, "job", 1)
	fmt.Println(res.Allowed())
	// Output:
	// true 0
	// 1
	// true
}

func ExampleLimiter_Penalize() {
	logins, _ := quota.New(quota.Config{Limits: []quota.Limit{quota.PerMinute(10)}})
	ctx := context.Background()
	res, _ := logins.Take(ctx, "10.0.0.7", 1) // a login attempt
	fmt.Println(res.Allowed(), res.Tightest().Remaining)
	res, _ = logins.Penalize(ctx, "10.0.0.7", 4) // its password was wrong: it costs 5 in all
	fmt.Println(res.Tightest().Remaining)
	res, _ = logins.Reward(ctx, "10.0.0.7", 3) // a captcha solved gives 3 back
	fmt.Println(res.Tightest().Remaining)
	// Output:
	// true 9
	// 5
	// 8
}

func ExampleLimiter_TakeUpTo() {
	jobs, _ := quota.New(quota.Config{Limits: []quota.Limit{quota.PerMinute(100)}})
	ctx := context.Background()
	granted, _, _ := jobs.TakeUpTo(ctx, "tenant-7", 80) // a batch of 80 jobs
	fmt.Println(granted)
	granted, res, _ := jobs.TakeUpTo(ctx, "tenant-7", 50) // 50 more: 20 fit
	fmt.Println(granted, res.Tightest().Remaining)
	granted, res, _ = jobs.TakeUpTo(ctx, "tenant-7", 10)
	fmt.Println(granted, res.Allowed())
	// Output:
	// 80
	// 20 0
	// 0 false
}
