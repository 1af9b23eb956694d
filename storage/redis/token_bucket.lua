-- Token bucket as a GCRA in integers, the twin of token_bucket.go. State:
-- time of the last update, the bucket's debt in units of 1/window token.

local function debt_at(last, debt)
  local elapsed = now - last
  if elapsed <= 0 then
    return debt
  end
  if elapsed >= cdiv(debt, limit) then
    return 0
  end
  return debt - elapsed * limit
end

local function expiry(last, debt)
  if debt == 0 then
    return 0
  end
  return last + cdiv(debt, limit)
end

local function take()
  local last, debt = load()
  debt = debt_at(last, debt)
  local capacity = burst * window
  local allowed, retry = 0, 0
  if cost > burst then
    retry = -1
  elseif debt + cost * window <= capacity then
    debt = debt + cost * window
    last = math.max(now, last) -- time never goes back for a key
    allowed = 1
    save(last, debt, 0, expiry(last, debt))
  else
    retry = cdiv(debt + cost * window - capacity, limit)
  end
  return {allowed, burst, math.max(0, burst - cdiv(debt, window)), cdiv(debt, limit), retry, 0}
end

local function refund()
  local last, debt = load()
  debt = math.max(0, debt_at(last, debt) - cost * window)
  last = math.max(now, last)
  save(last, debt, 0, expiry(last, debt))
  return {1}
end
