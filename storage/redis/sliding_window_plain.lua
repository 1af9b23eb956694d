    -- sliding_window_plain.lua: the sliding window's plain take (the
    -- contract is in plain_head.lua), the twin of sliding_window.lua for
    -- a take of one limit on a value that holds its state (its 12-byte
    -- form) or nothing.
    local start, cur, prev = 0, 0, 0
    if stored then
      start, cur, prev = unpack('<I6I3I3', stored)
    end
    -- An implausible state (a time too far ahead, a count above the
    -- limit) is repaired on the general path.
    plain = start <= at + ahead and cur <= limit1 and prev <= limit1
    local now = at
    if now >= start then -- time never goes back for a key
      if now >= start + window1 then
        local k = idiv(now - start, window1)
        if k == 1 then
          prev = cur
        else
          prev = 0
        end
        cur, start = 0, start + k * window1
      end
      if cur == 0 and prev == 0 then
        start = now
      end
    else
      now = start
    end
    local elapsed = now - start
    local weighted = prev * (window1 - elapsed)
    if request_cost > limit1 then
      allowed = 2
    elseif request_cost == 0 or weighted + (cur + request_cost) * window1 <= limit1 * window1 then
      cur, allowed, counted = cur + request_cost, 1, start
      if request_cost > 0 and max(cur, prev) < 16777216 then
        value, px = pack('<I6I3I3', start, cur, prev), (start + 2 * window1) * step1 - request_now
      elseif request_cost > 0 then
        plain = false -- a count of 2^24 and more: the 14-byte form
      end
    else
      -- Still in this window: need prev * (window - elapsed - t) <= room.
      local room = (limit1 - cur - request_cost) * window1
      if room >= 0 and prev > 0 then
        retry = window1 - elapsed - idiv(room, prev)
      end
      if retry <= 0 or retry >= window1 - elapsed then
        -- In the next window, e after its start, cur has become the
        -- previous count: need cur * (window - e) <= (limit - cost) * window.
        local e = 0
        if cur > 0 then
          e = max(0, window1 - idiv((limit1 - request_cost) * window1, cur))
        end
        retry = window1 - elapsed + e
      end
    end
    if cur > 0 then
      reset = start + 2 * window1 - now
    elseif prev > 0 then
      reset = start + window1 - now
    end
    remaining = max(0, limit1 - cur - idiv(weighted + window1 - 1, window1))
