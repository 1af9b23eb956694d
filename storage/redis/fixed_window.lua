-- fixed_window.lua: the fixed window, the body of head.lua's loops for
-- limit i (the contract of head, fragment and tail is in head.lua's
-- header). Reads stored, found, n, i, limit, window, counted_in, now,
-- ahead, cost, refund, penalize and reward; sets fmt, a, b, exp, allowed,
-- counted, remaining, reset, retry and repair.
-- The twin of quota/fixed_window.go, in its order: the state
-- (fixedWindow.read), plausible, adjust (a refund or a reward, then roll,
-- then a penalty), take and expiry (exp). State: window start (6 bytes)
-- and the units counted in it (4 bytes; a limit is below 2^32).
fmt = '<I6I4'
local start, count = 0, 0
if #stored == 10 * n then
  start, count = unpack(fmt, stored, 10 * i - 9)
elseif found then
  repair = true
end
-- A count above the limit reads as the whole quota spent for a take; an
-- adjustment keeps it, and changes it by its own units only (the twin of
-- fixedWindow.plausible).
if start > now + ahead then
  start, count, repair = 0, 0, true
elseif count > limit and not refund then
  count, repair = limit, true
end
if refund and not penalize then
  -- Credit the window the cost was counted in (a reward: the window
  -- running), then answer as a take of cost 0 would: the state it leaves.
  if count > 0 and (reward or start == counted_in) and now < start + window then
    count = max(0, count - cost)
  end
  cost = 0
end
if now < start then
  now = start -- time never goes back for a key
end
if count == 0 or now >= start + window then
  start, count = now, 0
end
if penalize then
  count, cost = max(count, min(limit, count + min(cost, limit))), 0
end
if cost > limit then
  retry = -1
elseif cost == 0 or count + cost <= limit then
  count = count + cost
  allowed, counted = 1, start
  a, b, exp = start, count, start -- a window ahead holds the key's clock
  if count > 0 then
    exp = start + window
  end
else
  retry = start + window - now
end
if count > 0 then
  reset = start + window - now
end
remaining = max(0, limit - count)
