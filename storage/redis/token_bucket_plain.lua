    -- token_bucket_plain.lua: the token bucket's plain take (the contract
    -- is in plain_head.lua), the twin of token_bucket.lua for a take of
    -- one limit on a value that holds its state (its 11-byte form) or
    -- nothing.
    local last, debt = 0, 0
    if stored then
      last, debt = unpack('<I6I5', stored)
    end
    -- An implausible state (a time too far ahead, a debt above the
    -- burst) is repaired on the general path.
    local capacity = burst1 * window1
    plain = last <= at + ahead and debt <= capacity
    local elapsed = at - last
    if elapsed > 0 then
      if elapsed >= idiv(debt + limit1 - 1, limit1) then
        debt = 0
      else
        debt = debt - elapsed * limit1
      end
    end
    last = max(at, last) -- time never goes back for a key
    if request_cost > burst1 then
      allowed = 2
    elseif debt + request_cost * window1 <= capacity then
      debt = debt + request_cost * window1
      allowed, counted = 1, last + idiv(debt, limit1)
      if request_cost > 0 and debt < 1099511627776 then
        value, px = pack('<I6I5', last, debt), (last + idiv(debt + limit1 - 1, limit1)) * step1 - request_now
      elseif request_cost > 0 then
        plain = false -- a debt of 2^40 and more: the 13-byte form
      end
    else
      retry = idiv(debt + request_cost * window1 - capacity + limit1 - 1, limit1)
    end
    remaining = max(0, burst1 - idiv(debt + window1 - 1, window1))
    reset = idiv(debt + limit1 - 1, limit1)
