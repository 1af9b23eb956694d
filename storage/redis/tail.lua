      -- The tail of every script: keep limit i's part, close the loops,
      -- write the states back and answer.
      if pass == 1 then
        if allowed == 0 then
          admitted = 0
        else
          admits = admits + 2 ^ i
        end
        if retry < 0 then
          never, retry = never + 2 ^ i, 0
        end
        if exp and exp > at then
          value = value .. struct.pack(fmt, a, b, c)
          exp_all = math.max(exp_all, exp * step)
        elseif exp then
          value = value .. struct.pack(fmt, 0, 0, 0) -- a state that holds nothing
        end
        answer = answer .. struct.pack('<I4I7I7I7', remaining, reset * step, retry * step, counted)
      else
        -- nothing was counted
        again = again .. struct.pack('<I4I7I7I7', remaining, reset * step, retry * step, 0)
      end
    else
      again = again .. string.sub(answer, 25 * i - 24, 25 * i)
    end
  end
  if refund or admitted == 1 or n == 1 then
    break
  end
end
if again ~= '' then
  answer = again -- the second pass ran
end

-- A refund writes every limit's state back, and so does a take that counted
-- a cost; the key lives until the last of them holds nothing (exp_all, in
-- ms).
if refund or (admitted == 1 and request_cost > 0) then
  if exp_all > request_now then
    redis.call('SET', key, value, 'PX', exp_all - request_now)
  else
    redis.call('DEL', key)
  end
elseif repair and redis.call('PTTL', key) == -1 then
  -- A value that was not a state of these rules, left as it is: it gets
  -- a TTL past any time it can still hold the key off, of the longest
  -- limit: its time may lie ahead (by up to `ahead`), and from there its
  -- state lasts two windows at most, or for a bucket the time to refill
  -- its whole burst.
  local hold = 0
  for i = 1, n do
    local limit, burst, window, step = struct.unpack('<I4I4I7I4', ARGV[1], 26 * i - 13)
    local lasts = math.max(2 * window, idiv(burst * window + limit - 1, limit))
    hold = math.max(hold, (math.max(window, idiv(60000 + step - 1, step)) + lasts) * step)
  end
  redis.call('PEXPIRE', key, hold)
end
-- The answer, packed like the request: flags (1 = allowed, and 2^i when
-- limit i can never admit the request), then for each limit remaining (4
-- bytes), reset, retry and counted (7 each). A refund's is the state it
-- leaves, as a take of cost 0 would see it.
return struct.pack('<B', admitted + never) .. answer
