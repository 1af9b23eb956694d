-- sliding_window.lua: the sliding window, the body of head.lua's loops
-- for limit i (the contract of head, fragment and tail is in head.lua's
-- header). Reads stored, found, n, i, limit, window, counted_in, now,
-- ahead, cost, refund, penalize and reward; sets fmt, a, b, c, exp,
-- allowed, counted, remaining, reset, retry and repair.
-- The twin of quota/sliding_window.go, in its order: the state
-- (slidingWindow.read), plausible, roll, adjust, take (and retryAfter) and
-- expiry (exp). State: the current window's start (6 bytes), its count
-- and the previous window's count (3 bytes each while both are below 2^24
-- and the key has one limit, else 4). The estimate times the window is
-- prev * (window - elapsed) + cur * window.
local start, cur, prev = 0, 0, 0
if n == 1 and #stored == 12 then
  start, cur, prev = unpack('<I6I3I3', stored)
elseif #stored == 14 * n then
  start, cur, prev = unpack('<I6I4I4', stored, 14 * i - 13)
elseif found then
  repair = true
end
if start > now + ahead then
  start, cur, prev, repair = 0, 0, 0, true
elseif (cur > limit or prev > limit) and not refund then
  -- A count above the limit (a larger MaxFunc's, or another program's)
  -- reads as the whole quota spent and is kept as it is (kept_cur,
  -- kept_prev below; the twin of slidingWindow.take).
  repair = true
end
if now >= start then -- time never goes back for a key
  if now >= start + window then
    local k = idiv(now - start, window)
    if k == 1 then
      prev = cur
    else
      prev = 0
    end
    cur = 0
    start = start + k * window
  end
  if cur == 0 and prev == 0 then
    start = now
  end
end

if refund then
  -- Count a penalty in the window running; take a reward back from the
  -- window running, then from the one before; credit a refund to the
  -- window it was counted in. Then answer as a take of cost 0 would: the
  -- state it leaves.
  if penalize then
    cur = max(cur, min(limit, cur + min(cost, limit)))
  elseif reward then
    local from_cur = min(cur, cost)
    cur, prev = cur - from_cur, max(0, prev - (cost - from_cur))
  elseif counted_in == start then
    cur = max(0, cur - cost)
  elseif counted_in == start - window then
    prev = max(0, prev - cost)
  end
  if cur == 0 and prev == 0 and now >= start then
    start = now -- an empty key starts afresh, as the take's roll has it
  end
  cost = 0
end
if now < start then
  now = start
end
local kept_cur, kept_prev = cur, prev
cur, prev = min(cur, limit), min(prev, limit)
local elapsed = now - start
local weighted = prev * (window - elapsed)
if cost > limit then
  retry = -1
elseif cost == 0 or weighted + (cur + cost) * window <= limit * window then
  cur = cur + cost
  allowed, counted = 1, start
  a, b, c, exp = start, kept_cur + cost, kept_prev, start
  if cur > 0 then
    exp = start + 2 * window
  elseif prev > 0 then
    exp = start + window
  end
else
  -- Still in this window: need prev * (window - elapsed - t) <= room.
  local room = (limit - cur - cost) * window
  if room >= 0 and prev > 0 then
    retry = window - elapsed - idiv(room, prev)
  end
  if retry <= 0 or retry >= window - elapsed then
    -- In the next window, e after its start, cur has become the previous
    -- count: need cur * (window - e) <= (limit - cost) * window.
    local e = 0
    if cur > 0 then
      e = max(0, window - idiv((limit - cost) * window, cur))
    end
    retry = window - elapsed + e
  end
end
if cur > 0 then
  reset = start + 2 * window - now
elseif prev > 0 then
  reset = start + window - now
end
remaining = min(limit, max(0, limit - cur - idiv(weighted + window - 1, window)))

if n == 1 and max(b, c) < 16777216 then
  fmt = '<I6I3I3'
else
  fmt = '<I6I4I4'
end
