package quota

// Result is s, an answer of c's Acquire, as a take's Result, for what
// reads Results (the middlewares' headers): one limit of Limit Max, with
// Remaining the key's free slots, RetryAfter s's hint, and Window c's
// Expiration, the longest a slot is held. ResetAfter is 0: when a slot
// comes back depends on when a request ends, which no one can say.
func (c *Concurrency) Result(s *Slot) Result {
	v := Result{n: 1, source: s.source}
	v.each[0] = Decision{
		Allowed:    s.allowed,
		Limit:      c.max,
		Remaining:  s.remaining,
		RetryAfter: s.retryAfter,
		Window:     c.expiration,
	}
	return v
}

// Event describes s, an answer of c's Acquire for key, as a
// DecisionEvent: Limit is Max, Remaining the free slots, Expiration c's,
// Cost 1, Algorithm "concurrency". DryRun and Latency are the caller's to
// set.
func (c *Concurrency) Event(key string, s *Slot) DecisionEvent {
	return DecisionEvent{
		Name:       c.name,
		Key:        key,
		Allowed:    s.allowed,
		Limit:      c.max,
		Remaining:  s.remaining,
		Expiration: c.expiration,
		Cost:       1,
		RetryAfter: s.retryAfter,
		Algorithm:  "concurrency",
		Backend:    c.backend,
		Source:     s.source,
	}
}

// Rejected is the answer for a request that holds no slot because it
// stopped waiting for one (AcquireWait's ctx ended): a rejection, with
// RetryAfter's hint.
func (c *Concurrency) Rejected() Slot {
	return Slot{limit: c.max, retryAfter: slotRetry, source: SourceBackend}
}
