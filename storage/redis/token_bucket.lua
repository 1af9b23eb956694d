-- token_bucket.lua: the token bucket as a GCRA in integers, the body of
-- head.lua's loops for limit i (the contract of head, fragment and tail
-- is in head.lua's header). Reads stored, found, n, i, limit, burst,
-- window, counted_in, at, now, ahead, cost, refund, penalize and reward;
-- sets fmt, a, b, exp, allowed, counted, remaining, reset, retry, turn
-- and repair.
-- The twin of quota/token_bucket.go, in its order: the state
-- (tokenBucket.read), plausible, debtAt (the refill to now), adjust, take
-- and expiry (exp). State: the time of the last update (6 bytes) and the
-- bucket's debt in units of 1/window token (a token is `window` units; the
-- bucket refills `limit` units a step), in 5 bytes while below 2^40 and
-- the key has one limit, else 7. (A value has 10 bytes a limit for the
-- fixed window, 11 or 13 for the bucket, 12 or 14 for the sliding window;
-- keys of different algorithms or numbers of limits are kept apart by
-- their names, not by these lengths.)
local last, debt = 0, 0
if n == 1 and #stored == 11 then
  last, debt = unpack('<I6I5', stored)
elseif #stored == 13 * n then
  last, debt = unpack('<I6I7', stored, 13 * i - 12)
elseif found then
  repair = true
end
if last > now + ahead then
  last, debt, repair = 0, 0, true
elseif debt > burst * window and not refund then
  -- (an adjustment keeps a debt above the burst: see fixed_window.lua)
  debt, repair = burst * window, true
end
-- A refund and a reward take their credit off the debt as it was last
-- updated (raw_last, raw_debt), without a refill to now at this rule's
-- rate, which gives back more than the credit when a rule of a lower
-- rate is the one in force (a MaxFunc).
local raw_last, raw_debt, credited = last, debt, false
local elapsed = now - last
if elapsed > 0 then
  if elapsed >= idiv(debt + limit - 1, limit) then
    debt = 0
  else
    debt = debt - elapsed * limit
  end
end
last = max(now, last) -- time never goes back for a key
turn = last

if refund then
  -- A penalty adds its cost to the debt, up to the whole burst; a reward
  -- takes its cost off; a refund gives back only what of the request's
  -- cost has not refilled by now (counted_in is when it will have, rounded
  -- down). Then answer as a take of cost 0 would: the state it leaves.
  if penalize then
    debt = max(debt, min(burst * window, debt + min(cost, burst) * window))
  else
    local credit = min(cost, burst) * window
    if not reward then
      credit = min(cost * window, max(0, (counted_in - now) * limit))
      if raw_last > now then
        -- A turn given back (Reserve): what no later turn counts on, the
        -- debt beyond counted_in being theirs (the twin of
        -- tokenBucket.untaken).
        local whole, gap = min(cost, burst) * window, counted_in - raw_last
        if gap < 0 and -gap >= idiv(whole + limit - 1, limit) then
          credit = 0
        elseif gap < 0 or gap < idiv(raw_debt + limit - 1, limit) then
          credit = min(credit, max(0, whole - (raw_debt - gap * limit)))
        end
      end
    end
    debt, raw_debt, credited = max(0, debt - credit), max(0, raw_debt - credit), true
    if not reward and raw_last > now then
      -- The bucket moved back toward now as far as its debt stays within
      -- the capacity (the twin of tokenBucket.back): the same bucket from
      -- then on, whose clock the turn given back no longer holds.
      local room = burst * window - raw_debt
      if room > 0 then
        local steps = min(raw_last - now, idiv(room, limit))
        raw_last, raw_debt = raw_last - steps, raw_debt + steps * limit
      end
      last, debt, turn = raw_last, raw_debt, raw_last -- no refill: raw_last >= now
    end
  end
  cost = 0
end
local capacity = burst * window
if cost > burst then
  retry = -1
elseif cost == 0 or debt + cost * window <= capacity then
  debt = debt + cost * window
  allowed, counted = 1, last + idiv(debt, limit)
  a, b = last, debt
  exp = last + idiv(debt + limit - 1, limit)
  if debt == 0 then
    exp = last -- an update ahead holds the key's clock until then
  end
else
  retry = idiv(debt + cost * window - capacity + limit - 1, limit)
end
remaining = max(0, burst - idiv(debt + window - 1, window))
reset = idiv(debt + limit - 1, limit)
if credited then
  -- Kept while it has debt, even when this rule has refilled it: the rule
  -- in force may refill more slowly (see adjustAll).
  a, b, exp = raw_last, raw_debt, raw_last
  if raw_debt > 0 then
    exp = max(at + 1, raw_last + idiv(raw_debt + limit - 1, limit))
  end
end

if n == 1 and b < 1099511627776 then
  fmt = '<I6I5'
else
  fmt = '<I6I7'
end
