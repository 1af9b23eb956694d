-- Fixed window, the twin of fixed_window.go. State: window start, count.

local function expiry(start, count)
  if count == 0 then
    return 0
  end
  return start + window
end

local function take()
  local start, count = load()
  if count > 0 and now < start then
    now = start -- time never goes back for a key
  end
  if count == 0 or now >= start + window then
    start, count = now, 0
  end
  local allowed, retry, counted = 0, 0, 0
  if cost > limit then
    retry = -1
  elseif count + cost <= limit then
    count = count + cost
    allowed, counted = 1, start
    if count > 0 then
      save(start, count, 0, expiry(start, count))
    end
  else
    retry = start + window - now
  end
  local reset = 0
  if count > 0 then
    reset = start + window - now
  end
  return {allowed, limit, math.max(0, limit - count), reset, retry, counted}
end

local function refund()
  local start, count = load()
  if count > 0 and start == counted_in and now < start + window then
    count = math.max(0, count - cost)
    save(start, count, 0, expiry(start, count))
  end
  return {1}
end
