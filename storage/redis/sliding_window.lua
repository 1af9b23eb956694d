-- Sliding window, the twin of sliding_window.go. State: current window's
-- start, its count, the previous window's count. The estimate times the
-- window is prev * (window - elapsed) + cur * window.

local function roll()
  local start, cur, prev = load()
  if now < start then
    return start, cur, prev -- time never goes back for a key
  end
  if now >= start + window then
    local n = idiv(now - start, window)
    if n == 1 then
      prev = cur
    else
      prev = 0
    end
    cur = 0
    start = start + n * window
  end
  if cur == 0 and prev == 0 then
    start = now
  end
  return start, cur, prev
end

local function expiry(start, cur, prev)
  if cur > 0 then
    return start + 2 * window
  elseif prev > 0 then
    return start + window
  end
  return 0
end

-- retry_after is the time from elapsed until a request of cost would be
-- admitted, given that it is not admitted now and cost <= limit.
local function retry_after(elapsed, cur, prev)
  local room = (limit - cur - cost) * window
  if room >= 0 and prev > 0 then
    local t = window - elapsed - idiv(room, prev)
    if t < window - elapsed then
      return t
    end
  end
  local e = 0
  if cur > 0 then
    e = math.max(0, window - idiv((limit - cost) * window, cur))
  end
  return window - elapsed + e
end

local function take()
  local start, cur, prev = roll()
  if now < start then
    now = start
  end
  local elapsed = now - start
  local weighted = prev * (window - elapsed)
  local allowed, retry, counted = 0, 0, 0
  if cost > limit then
    retry = -1
  elseif weighted + (cur + cost) * window <= limit * window then
    cur = cur + cost
    allowed, counted = 1, start
    local exp = expiry(start, cur, prev)
    if exp > 0 then
      save(start, cur, prev, exp)
    end
  else
    retry = retry_after(elapsed, cur, prev)
  end
  local remaining = math.min(limit, math.max(0, limit - cur - cdiv(weighted, window)))
  local reset = 0
  if cur > 0 then
    reset = start + 2 * window - now
  elseif prev > 0 then
    reset = start + window - now
  end
  return {allowed, limit, remaining, reset, retry, counted}
end

local function refund()
  local start, cur, prev = roll()
  if counted_in == start then
    cur = math.max(0, cur - cost)
  elseif counted_in == start - window then
    prev = math.max(0, prev - cost)
  else
    return {0}
  end
  save(start, cur, prev, expiry(start, cur, prev))
  return {1}
end
