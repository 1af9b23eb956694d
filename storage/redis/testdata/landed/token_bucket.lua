-- Token bucket as a GCRA in integers, the twin of token_bucket.go. State:
-- the time of the last update (6 bytes) and the bucket's debt in units of
-- 1/window token (a token is `window` units; the bucket refills `limit`
-- units a ms), in 5 bytes while below 2^40 and the key has one limit, else
-- 7. (A value has 10 bytes a limit for the fixed window, 11 or 13 for the
-- bucket, 12 or 14 for the sliding window; keys of different algorithms or
-- numbers of limits are kept apart by their names, not by these lengths.)
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
elseif debt > burst * window then
  debt, repair = burst * window, true
end
local elapsed = now - last
if elapsed > 0 then
  if elapsed >= idiv(debt + limit - 1, limit) then
    debt = 0
  else
    debt = debt - elapsed * limit
  end
end
last = max(now, last) -- time never goes back for a key

if refund then
  -- A penalty adds its cost to the debt, up to the whole burst; a reward
  -- takes its cost off; a refund gives back only what of the request's
  -- cost has not refilled by now (counted_in is when it will have, rounded
  -- down). Then answer as a take of cost 0 would: the state it leaves.
  if penalize then
    debt = min(burst * window, debt + min(cost, burst) * window)
  elseif reward then
    debt = max(0, debt - min(cost, burst) * window)
  else
    debt = max(0, debt - min(cost * window, max(0, (counted_in - now) * limit)))
  end
  cost = 0
end
local capacity = burst * window
if cost > burst then
  retry = -1
elseif debt + cost * window <= capacity then
  debt = debt + cost * window
  allowed, counted = 1, last + idiv(debt, limit)
  a, b = last, debt
  exp = last + idiv(debt + limit - 1, limit)
  if debt == 0 then
    exp = 0
  end
else
  retry = idiv(debt + cost * window - capacity + limit - 1, limit)
end
remaining = max(0, burst - idiv(debt + window - 1, window))
reset = idiv(debt + limit - 1, limit)

if n == 1 and b < 1099511627776 then
  fmt = '<I6I5'
else
  fmt = '<I6I7'
end
