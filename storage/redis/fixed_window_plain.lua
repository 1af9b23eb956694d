    -- fixed_window_plain.lua: the fixed window's plain take (the contract
    -- is in plain_head.lua), the twin of fixed_window.lua for a take of
    -- one limit on a value that holds its state or nothing.
    local start, count = 0, 0
    if stored then
      start, count = unpack('<I6I4', stored)
    end
    -- An implausible state (a time too far ahead, a count above the
    -- limit) is repaired on the general path.
    plain = start <= at + ahead and count <= limit1
    local now = max(at, start) -- time never goes back for a key
    if count == 0 or now >= start + window1 then
      start, count = now, 0
    end
    if request_cost > limit1 then
      allowed = 2
    elseif count + request_cost <= limit1 then
      count, allowed, counted = count + request_cost, 1, start
      if request_cost > 0 then
        value, px = pack('<I6I4', start, count), (start + window1) * step1 - request_now
      end
    else
      retry = start + window1 - now
    end
    if count > 0 then
      reset = start + window1 - now
    end
    remaining = limit1 - count
