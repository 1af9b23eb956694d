-- sliding_log.lua: the sliding log, the body of head.lua's loops for
-- limit i (the contract of head, fragment and tail is in head.lua's
-- header). Reads stored, found, n, i, limit, window, counted_in, at, now,
-- ahead, cost, refund, penalize, reward and log_part (from
-- sliding_log_prelude.lua); sets part, exp, allowed, counted, remaining,
-- reset, retry and repair (fmt stays nil: part is packed already).
-- The twin of quota/sliding_log.go, in its order: the state
-- (slidingLog.read), plausible, live (the entries still in the window),
-- adjust, take and expiry (exp); Go keeps the entries in a ring (logs),
-- this file in a string. The log holds the times of the units counted in
-- the last window (a cost of k is k entries of one time); entries at or
-- before now - window have left it. The log of limit i is read from stored
-- as entries, a string of 6-byte times, and the state to keep is part.
local entries, count = '', 0
local at0 = #stored > 0 and log_part(stored, #stored, n, i)
if at0 then
  count = unpack('<I2', stored, at0)
  entries = sub(stored, at0 + 2, at0 + 1 + 6 * count)
elseif found and #stored > 0 then
  repair = true
end
local newest = 0
if count > 0 then
  newest = unpack('<I6', entries, 6 * count - 5)
  if newest > now + ahead then
    entries, count, repair = '', 0, true
  else
    if count > limit then
      -- A log kept from before Max was lowered: its newest limit entries.
      entries, count, repair = sub(entries, 6 * (count - limit) + 1), limit, true
    end
    if now < newest then
      now = newest -- time never goes back for a key
    end
  end
end
-- The entries that have left: a binary search for the first that has not.
local lo, hi = 0, count
while lo < hi do
  local mid = floor((lo + hi) / 2)
  if unpack('<I6', entries, 6 * mid + 1) > now - window then
    hi = mid
  else
    lo = mid + 1
  end
end
if lo > 0 then
  entries, count = sub(entries, 6 * lo + 1), count - lo
end
-- A log kept after an entry later than its newest is out of time order:
-- another program's value, read as no state (and given a TTL, if nothing
-- is written), so that what it holds cannot hold the key for longer than
-- the rule would. (Checking the first entry kept is enough: any entry out
-- of order becomes the first kept once the entries before it have left.)
if count > 0 and unpack('<I6', entries, 1) > newest then
  entries, count, repair = '', 0, true
end

if refund then
  -- A penalty enters cost entries at now (the oldest leave when the log
  -- is full); a reward takes out the newest; a refund takes out up to cost
  -- entries of the time its take was counted at, the later ones kept.
  -- Then the call answers as a take of cost 0 would.
  if penalize then
    local k = min(cost, limit)
    if count + k > limit then
      entries = sub(entries, 6 * (count + k - limit) + 1)
      count = limit - k
    end
    entries, count = entries .. string.rep(pack('<I6', now), k), count + k
  elseif reward then
    local k = min(cost, count)
    if count > 0 and newest > at and k > 0 and (k == count or unpack('<I6', entries, 6 * (count - k) - 5) < newest) then
      k = 0 -- its newest entries lie ahead: see the refund's below
    end
    entries, count = sub(entries, 1, 6 * (count - k)), count - k
  else
    local last = count
    while last > 0 and unpack('<I6', entries, 6 * last - 5) > counted_in do
      last = last - 1
    end
    local k = 0
    while k < min(cost, last) and unpack('<I6', entries, 6 * (last - k) - 5) == counted_in do
      k = k + 1
    end
    if last == count and counted_in > at and (k == last or unpack('<I6', entries, 6 * (last - k) - 5) < counted_in) then
      -- A turn ahead whose entries are the newest: taking them out would
      -- move the key's clock back, before the entries the log let go when
      -- they were made. It is not given back.
      k = 0
    end
    entries, count = sub(entries, 1, 6 * (last - k)) .. sub(entries, 6 * last + 1), count - k
  end
  -- The answer is a take's of cost 0 at the request's time, raised to the
  -- newest entry left (as adjustAll's decideRead raises it).
  now = at
  if count > 0 then
    now = max(now, (unpack('<I6', entries, 6 * count - 5)))
  end
  cost = 0
end
local oldest = now
if count > 0 then
  oldest = unpack('<I6', entries, 1)
end
if cost > limit then
  retry = -1
elseif count + cost <= limit then
  if cost > 0 then
    entries, count = entries .. string.rep(pack('<I6', now), cost), count + cost
  end
  allowed, counted = 1, now
  part, exp = pack('<I2', count) .. entries, 0
  if count > 0 then
    exp = unpack('<I6', entries, 6 * count - 5) + window -- the newest leaves
  end
else
  -- The take fits once the (count + cost - limit)-th oldest has left
  -- (within a window: a log of another program's times holds no longer).
  retry = min(window, unpack('<I6', entries, 6 * (count + cost - limit) - 5) + window - now)
end
if count > 0 then
  reset = min(window, oldest + window - now) -- when the oldest leaves
end
remaining = max(0, limit - count)
