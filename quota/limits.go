package quota

import "time"

// A limiter decides each request under one or more limits (Config.Limits),
// each a rule of its own over the same key: say 10 per second and 1000 per
// hour. They are decided as one:
//
//   - a request is admitted when every limit admits it, and its cost is then
//     counted under each;
//   - a request that any limit rejects is counted under none, so a client
//     held back by its hourly quota does not spend its per-second one;
//   - the state of every limit of a key lives in one place (one manager
//     entry, one Redis key), read and written by one step, so that the
//     decision is atomic in memory and in Redis alike.
//
// A single Max per Expiration is the case of one limit, and costs what it
// did before there were several: the loops below run once.

// maxLimits is the most limits one limiter decides together.
const maxLimits = 4

// maxStates is the most states a key keeps: one a limit, and one for a
// block (see Config.BlockFor).
const maxStates = maxLimits + 1

// limits is what a decision is made against: one rule per limit. It is
// passed by pointer to a value the caller owns (on its stack), so that a
// per-request change of the rule (MaxFunc) costs no allocation.
type limits struct {
	n    int
	r    [maxLimits]rule
	upTo bool // a take of as much of its cost as fits (TakeUpTo)
	// turn marks a take with a turn (Reserve), which waits at most delay
	// ms for it (see decideTurnInto); 0 for one admitted only when its
	// turn is now.
	turn  bool
	delay int64
	// block is Config.BlockFor and gap Config.MinInterval, in ms, 0 for
	// none; with either, a key keeps one more state after its limits' (see
	// decideKeyInto).
	block, gap int64
}

// keyRules reports whether ls has rules of a key beside its limits' counts
// (BlockFor, MinInterval).
func (ls *limits) keyRules() bool { return ls.block > 0 || ls.gap > 0 }

// states is how many states a key of ls keeps.
func (ls *limits) states() int {
	if ls.keyRules() {
		return ls.n + 1
	}
	return ls.n
}

// stored is how many states a Storage keeps of a key of ls after a
// decision at now: one more than its limits' with rules of the key's own,
// and also without them while a block or a gap that another version of
// the limiter set still runs (a rolling deploy that turns BlockFor or
// MinInterval off), which this one keeps for the replicas that enforce
// it, unless it ends later than any rule could have set (maxBlock). Every
// version reads both (decodeStates). The Lua twins keep them alike.
func (ls *limits) stored(sts *[maxStates]state, now int64) int {
	blockEnd, gapEnd, holdEnd := keyEnds{}.read(sts[ls.n], now)
	if holdEnd > now {
		sts[ls.n] = keyEnds{}.state(0, 0, holdEnd, now) // an operator's hold
		return ls.n + 1
	}
	if ls.keyRules() {
		blockEnd, gapEnd = ls.ownEnds(blockEnd, gapEnd)
		sts[ls.n] = keyEnds{}.state(blockEnd, gapEnd, 0, now)
		return ls.n + 1
	}
	if end := max(blockEnd, gapEnd); end > now && end <= now+maxBlock.Milliseconds() {
		return ls.n + 1
	}
	sts[ls.n] = state{} // and so not in expiryAll
	return ls.n
}

// ownEnds is blockEnd and gapEnd with the end of a rule ls does not have
// made 0: the ends a limiter with rules of its key's own writes, as the
// Lua twins write them.
func (ls *limits) ownEnds(blockEnd, gapEnd int64) (int64, int64) {
	if ls.block == 0 {
		blockEnd = 0
	}
	if ls.gap == 0 {
		gapEnd = 0
	}
	return blockEnd, gapEnd
}

// one returns the limits of a single rule.
func one(r rule) limits {
	ls := limits{n: 1}
	ls.r[0] = r
	return ls
}

// Result is what a take decided, under every limit of the Limiter: one
// Decision per limit (Decisions), each with its Limit, Remaining,
// ResetAfter and RetryAfter. Every part has the same Allowed: whether the
// take was admitted and counted. On a rejection, a limit that would have
// admitted it has RetryAfter 0 and describes its state as it stands,
// without the cost.
type Result struct {
	n       int
	each    [maxLimits]Decision
	source  Source     // what decided
	varied  bool       // by TakeWith, under first
	adjust  adjustment // for adjustAll: a refund of this take, or the adjustment it stands for
	granted int64      // what a take of limits.upTo took
	lease   uint64     // SourceLease: the share it was admitted from
	wait    int64      // ms from the decision to the take's turn (Reserve)
	first   rule
}

// Allowed reports whether the take was admitted and its cost counted.
func (v *Result) Allowed() bool { return v.each[0].Allowed }

// RetryAfter is 0 for an admitted take; for a rejected one, when every
// limit would admit the same take: the longest RetryAfter of the limits
// (Never when one never will).
func (v *Result) RetryAfter() time.Duration {
	retry := v.each[0].RetryAfter
	for i := 1; i < v.n; i++ {
		retry = max(retry, v.each[i].RetryAfter)
	}
	return retry
}

// Decisions returns each limit's part, in the order of Config.Limits.
func (v *Result) Decisions() []Decision { return v.each[:v.n] }

// Tightest returns the part of the most restrictive limit, the one the
// X-RateLimit headers describe: the least Remaining, then the longest
// wait.
func (v *Result) Tightest() Decision { return v.each[v.tightest()] }

// Source says what answered: the backend, the deny cache, or the failure
// policy.
func (v *Result) Source() Source { return v.source }

// tightest returns the index of the most restrictive limit, the one the
// X-RateLimit headers and OnDecision describe: the least Remaining, then
// the longest wait (RetryAfter on a rejection, else ResetAfter).
func (v *Result) tightest() int {
	best := 0
	for i := 1; i < v.n; i++ {
		d, b := &v.each[i], &v.each[best]
		if d.Remaining < b.Remaining ||
			d.Remaining == b.Remaining && (d.RetryAfter > b.RetryAfter ||
				d.RetryAfter == b.RetryAfter && d.ResetAfter > b.ResetAfter) {
			best = i
		}
	}
	return best
}

// decide applies a to the states of every limit at now (ms; each limit
// decides in its own steps) for a request of
// cost. When every limit admits it, sts holds the states with the cost
// counted; otherwise sts is left as it was, and a limit that alone would
// have admitted it is decided again at cost 0, so that its part describes
// the state the request leaves behind. Both backends' twins (the Lua
// scripts) do the same, pass for pass.
func (a Algorithm) decide(sts *[maxStates]state, lg *logs, now int64, ls *limits, cost int64) Result {
	var v Result
	a.decideInto(&v, sts, lg, now, ls, cost)
	return v
}

// decideInto is decide writing its Result into v, which must be zero: the
// path of every request, where a Result copied from call to call costs
// more than the decision. Under SlidingLog, lg holds the key's logs,
// which it only reads: the backend records an admitted take's entries
// (logs.record).
func (a Algorithm) decideInto(v *Result, sts *[maxStates]state, lg *logs, now int64, ls *limits, cost int64) {
	a.plausibleAll(sts, now, ls, true)
	a.decideRead(v, sts, lg, now, ls, cost)
}

// decideOne is decideInto for one limit under an algorithm other than
// SlidingLog, the path of most takes: the same plausibility and step on
// s, without the loops over limits and the switches each makes.
func (a Algorithm) decideOne(v *Result, s *state, now int64, r *rule, cost int64) {
	v.n = 1
	at := r.at(now)
	switch a {
	case FixedWindow:
		fixedWindow{}.plausible(s, at, *r, true)
		v.each[0] = fixedWindow{}.take(s, at, *r, cost)
	case SlidingWindow:
		slidingWindow{}.plausible(s, at, *r, true)
		v.each[0] = slidingWindow{}.take(s, at, *r, cost)
	default:
		tokenBucket{}.plausible(s, at, *r, true)
		v.each[0] = tokenBucket{}.take(s, at, *r, cost)
	}
}

// decideRead is decideInto on states already read as plausible: a take's,
// or an adjustment's, whose counts may lie above the limit, where a take
// of cost 0 still fits.
func (a Algorithm) decideRead(v *Result, sts *[maxStates]state, lg *logs, now int64, ls *limits, cost int64) {
	v.n = ls.n
	if ls.n == 1 {
		if a == SlidingLog {
			v.each[0] = slidingLog{}.take(&sts[0], lg.ringOf(0), ls.r[0].at(now), ls.r[0], cost)
			return
		}
		v.each[0] = a.step(&sts[0], ls.r[0].at(now), ls.r[0], cost) // the common path: one call less
		return
	}
	var next [maxStates]state
	allowed := true
	for i := range ls.n {
		next[i] = sts[i]
		if a == SlidingLog {
			v.each[i] = slidingLog{}.take(&next[i], lg.ringOf(i), ls.r[i].at(now), ls.r[i], cost)
		} else {
			v.each[i] = a.step(&next[i], ls.r[i].at(now), ls.r[i], cost)
		}
		allowed = allowed && v.each[i].Allowed
	}
	if allowed {
		copy(sts[:ls.n], next[:ls.n])
		return
	}
	for i := range ls.n {
		if v.each[i].Allowed {
			s := sts[i]
			if a == SlidingLog {
				v.each[i] = slidingLog{}.take(&s, lg.ringOf(i), ls.r[i].at(now), ls.r[i], 0)
			} else {
				v.each[i] = a.step(&s, ls.r[i].at(now), ls.r[i], 0)
			}
			v.each[i].Allowed, v.each[i].countedIn = false, 0 // nothing was counted
		}
	}
}

// decideUpToInto is decideInto for a take of as much of cost as every
// limit has room for now (the least Remaining of a take of 0), or, when
// none has room for one unit, of 1, which it rejects; v.granted is what it
// took. The Lua twins do the same in one script call, with a pass at cost
// 0 before the take.
func (a Algorithm) decideUpToInto(v *Result, sts *[maxStates]state, lg *logs, now int64, ls *limits, cost int64) {
	probe := *sts
	var room Result
	a.decideInto(&room, &probe, lg, now, ls, 0)
	fit := int64(room.each[0].Remaining)
	for i := 1; i < ls.n; i++ {
		fit = min(fit, int64(room.each[i].Remaining))
	}
	take := min(cost, max(fit, 1))
	a.decideInto(v, sts, lg, now, ls, take)
	if v.Allowed() {
		v.granted = take
	}
}

// plausibleAll makes the states read fit their rules, so that no value
// (one written under another rule, or by another program) holds a key off
// for longer than the rule itself would; each algorithm's plausible says
// how, as its Lua twin reads its values:
//
//   - a state whose time lies too far past now (rule.tooFarAhead) was not
//     written under this rule near now: it reads as no state;
//   - for a take, a count above the rule's quota (Max units in a window,
//     or Burst tokens of debt; a state kept from before Max or Burst was
//     lowered) reads as the whole quota spent, and one below zero as
//     nothing. An adjustment (take false) keeps a count above the quota
//     (see adjustAll).
func (a Algorithm) plausibleAll(sts *[maxStates]state, now int64, ls *limits, take bool) {
	for i := range ls.n {
		s, r := &sts[i], &ls.r[i]
		switch at := r.at(now); a {
		case FixedWindow:
			fixedWindow{}.plausible(s, at, *r, take)
		case SlidingWindow:
			slidingWindow{}.plausible(s, at, *r, take)
		case SlidingLog:
			slidingLog{}.plausible(s, at, *r, take)
		default:
			tokenBucket{}.plausible(s, at, *r, take)
		}
	}
}

// adjustAll applies the adjustment v.adjust of cost units to the states
// of every limit: a refund credits each in the window its part of v says
// the cost was counted in; a penalty or a reward (Penalize, Reward)
// applies to what each counts now. It returns the Result of a take of cost
// 0 after it: the state the adjustment leaves, for the headers. The Lua
// twins do the same in one script call.
//
// An adjustment changes a key's counts by its own units and no more,
// whatever the limit in force: it reads the states as plausibleAll does
// for an adjustment, without the take's count clamp. A count above this
// rule's quota was spent under a larger one (a MaxFunc of another request,
// or a Max lowered by a deploy); cutting it down to this rule's quota
// would give back what the refunded request never took. A take reads it as
// the whole quota spent. For the same reason the backends keep the key at
// least as long as they kept it before an adjustment: its end was set
// under the rule of its last take, which this rule may not see.
func (a Algorithm) adjustAll(sts *[maxStates]state, lg *logs, now int64, ls *limits, cost int64, v *Result) Result {
	a.plausibleAll(sts, now, ls, false)
	for i := range ls.n {
		if a == SlidingLog {
			sts[i] = slidingLog{}.adjust(v.adjust, sts[i], lg.ringOf(i), ls.r[i].at(now), ls.r[i], cost, v.each[i])
			continue
		}
		sts[i] = a.adjust(v.adjust, sts[i], ls.r[i].at(now), ls.r[i], cost, v.each[i])
	}
	view := *sts // the take of 0 reads; what is kept is what the adjustments left
	var after Result
	a.decideRead(&after, &view, lg, now, ls, 0)
	for i := range ls.n {
		// What a state holds has ended: kept as nothing, as the Lua twins
		// keep it. Not a bucket's debt that a refund or reward left: it
		// has refilled at this rule's rate, not always at the rate in force.
		if a.expiry(sts[i], ls.r[i]) <= ls.r[i].at(now) && (a != TokenBucket || v.adjust == penalty) {
			sts[i] = state{}
		}
	}
	return after
}

// keep is when the states of every limit, after an adjustment, stop being
// kept: at exp (expiryAll), or at kept, when the key was kept until then,
// if any state still holds a count. The Lua twins do the same.
func (a Algorithm) keep(sts *[maxStates]state, ls *limits, exp, kept int64) int64 {
	for i := range ls.n {
		if a.holds(sts[i]) {
			return max(exp, kept)
		}
	}
	return exp
}

// expiryAll is the time (ms) from which the states of every limit hold
// nothing: the latest of their expiries.
func (a Algorithm) expiryAll(sts *[maxStates]state, ls *limits) int64 {
	if ls.n == 1 { // the common case, without the loop
		return max(0, a.expiry(sts[0], ls.r[0])*ls.r[0].stepMillis(), sts[1].a, sts[1].b)
	}
	exp := int64(0)
	for i := range ls.n {
		exp = max(exp, a.expiry(sts[i], ls.r[i])*ls.r[i].stepMillis())
	}
	// The ends of the block and the gap, this limiter's or kept for another
	// version's (limits.stored); 0 without either.
	return max(exp, sts[ls.n].a, sts[ls.n].b) // the ends, or a hold's (keyEnds)
}
