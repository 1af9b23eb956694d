      -- The tail of every script: keep limit i's part, close the loops,
      -- write the states back and answer.
      if pass == 1 then
        admits[i] = allowed == 1
        if allowed == 0 then
          admitted = 0
        end
        if retry < 0 then
          never, retry = never + 2 ^ i, 0
        end
        if exp and exp > request_now then
          parts[i] = struct.pack(fmt, a, b, c)
          exp_all = math.max(exp_all, exp)
        elseif exp then
          parts[i] = struct.pack(fmt, 0, 0, 0) -- a state that holds nothing
        end
      else
        counted = 0 -- nothing was counted
      end
      answers[i] = struct.pack('<I4I7I7I7', remaining, reset, retry, counted)
    end
  end
  if refund or admitted == 1 or n == 1 then
    break
  end
end

-- A refund writes every limit's state back, and so does a take that counted
-- a cost; the key lives until the last of them holds nothing.
if refund or (admitted == 1 and request_cost > 0) then
  if exp_all > request_now then
    redis.call('SET', key, table.concat(parts), 'PX', exp_all - request_now)
  else
    redis.call('DEL', key)
  end
end
if refund then
  return 1
end
-- The answer, packed like the request: flags (1 = allowed, and 2^i when
-- limit i can never admit the request), then for each limit remaining (4
-- bytes), reset, retry and counted (7 each).
return struct.pack('<B', admitted + never) .. table.concat(answers)
