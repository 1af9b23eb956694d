      -- tail.lua: the tail of every algorithm's script, after its
      -- fragment (the contract of head, fragment and tail is in head.lua's
      -- header). It keeps limit i's part of the value and of the answer,
      -- closes head.lua's loops, applies the key's rules (a block, a gap),
      -- writes the value back and answers. Reads what the fragment set
      -- (a, b, c, fmt, part, exp, allowed, remaining, reset, retry,
      -- counted, repair) and head.lua's locals of the call. Writes the key
      -- (SET with a PX of exp_all, or DEL), or gives a value it could not
      -- read a TTL; for an admitted take once per request, writes its
      -- record (the call's second key). Answers as described at the end.
      -- The Go twins, in quota: decideRead's second pass (limits.go),
      -- decideEnds (a block after a rejection, the gap after an admission)
      -- and Result.block (block.go), expiryAll, keep and limits.stored
      -- (how long the key is kept, and the ends it keeps); storage/redis's
      -- decodeResults (wire.go) reads the answer.
      if pass == 1 then
        if tries > 1 then
          local decided = turn or now
          clock = max(clock, decided * step)
          if retry < 0 then
            later = -1
          elseif later >= 0 then
            later = max(later, (decided + retry) * step)
          end
        end
        if allowed == 0 then
          admitted = 0
        else
          admits = admits + flag[i]
        end
        if retry < 0 then
          never, retry = never + flag[i], 0
        end
        if exp and exp > at then
          exp_all = max(exp_all, exp * step)
        elseif exp then
          a, b, c, part = 0, 0, 0, '\0\0' -- a state that holds nothing
        end
        if exp and fmt then
          part = pack(fmt, a, b, c)
        end
        if n == 1 then
          if exp then
            value = part
          end
          remaining1, reset1, retry1, counted1 = remaining, reset * step, retry * step, counted
        else
          if exp then
            value = value .. part
          end
          answer = answer .. pack('<I4I7I7I7', remaining, reset * step, retry * step, counted)
        end
      elseif pass == 0 then
        if room < 0 or remaining < room then
          room = remaining
        end
        if reject_rest or peek then
          -- A held call's (or a peek's) look at its cost: the limit's wait (0 when the
          -- cost fits now), or never.
          if retry < 0 then
            never, retry = never + flag[i], 0
          end
          if n == 1 then
            wait1 = retry * step
          else
            waits = waits .. pack('<I7', retry * step)
          end
        end
      else
        -- nothing was counted
        again = again .. pack('<I4I7I7I7', remaining, reset * step, retry * step, 0)
      end
    else
      again = again .. sub(answer, 25 * i - 24, 25 * i)
    end
  end
  if pass == 0 then
    if room > 0 then
      request_cost = min(request_cost, room)
    else
      request_cost = min(request_cost, 1)
    end
  elseif refund or admitted == 1 or n == 1 then
    break
  end
end
if again ~= '' then
  answer = again -- the second pass ran
end
if tries == 1 then
  break
end
-- A take with a turn: admitted when every limit decided at request_now;
-- else tried again where they all will admit it, within max_delay.
if admitted == 1 then
  if clock == request_now then
    break
  end
  later = clock
end
if later < 0 or later - real_now > max_delay or try == tries then
  turn_rejected = true
  break
end
request_now = later
end
local turn_wait = ''
if tries > 1 then
  if turn_rejected then
    -- Counts nothing; its retries and resets measured from real_now (the
    -- twin of Result.rejectFrom).
    local ahead, least = request_now - real_now, max(0, later - real_now)
    admitted = 0
    if n == 1 then
      if never == 0 then
        retry1 = max(retry1 + ahead, least)
      end
      if reset1 > 0 then
        reset1 = reset1 + ahead
      end
      counted1 = 0
    else
      local parts = ''
      for i = 1, n do
        local remaining, reset, retry = unpack('<I4I7I7', answer, 25 * i - 24)
        if floor(never / flag[i]) % 2 == 0 then
          retry = max(retry + ahead, least)
        end
        if reset > 0 then
          reset = reset + ahead
        end
        parts = parts .. pack('<I4I7I7I7', remaining, reset, retry, 0)
      end
      answer = parts
    end
    turn_wait = pack('<I6', 0)
  else
    turn_wait = pack('<I6', request_now - real_now)
  end
  request_now = real_now
elseif turn_arg then
  turn_wait = pack('<I6', 0)
end
if not refund and not blocked_now and not peek then
  if (reject_rest or admitted == 0) and never == 0 then
    -- A take rejected for the gap, or one the limits reject, blocks the
    -- key, unless no wait would admit it.
    if blocking then
      block_end, key_changed = request_now + block_ms, true
      reject_rest = max(reject_rest or 0, block_ms)
    end
  elseif spacing and admitted == 1 and request_cost > 0 then
    gap_end, key_changed = request_now + gap_ms, true -- the gap starts
  end
end
if reject_rest then
  -- Rejected for reject_rest: nothing remains, and each limit's retry
  -- (of a held call, at least its wait) and reset last at least that
  -- long, its reset as long as its retry but for a limit that never admits
  -- (the twin of rejectHeld and Result.block).
  admitted = 0
  if n == 1 then
    retry1 = max(retry1, wait1, reject_rest)
    remaining1, reset1, counted1 = 0, max(reset1, retry1), 0
  else
    local parts = ''
    for i = 1, n do
      local _, reset, retry = unpack('<I4I7I7', answer, 25 * i - 24)
      retry = max(retry, reject_rest)
      if waits ~= '' then
        retry = max(retry, (unpack('<I7', waits, 7 * i - 6)))
      end
      parts = parts .. pack('<I4I7I7I7', 0, max(reset, retry), retry, 0)
    end
    answer = parts
  end
end
if peek then
  -- A peek's answer: each limit's state as a take of 0 sees it, its retry
  -- the wait of the take (pass 0), at least peek_rest; admitted when no
  -- limit waits and nothing holds the key (the twin of peekInto).
  admitted = 0
  if peek_rest == 0 and never == 0 then
    admitted = 1
  end
  if n == 1 then
    retry1, counted1 = max(wait1, peek_rest), 0
    if wait1 > 0 then
      admitted = 0
    end
  else
    local parts = ''
    for i = 1, n do
      local remaining, reset = unpack('<I4I7', answer, 25 * i - 24)
      local wait = unpack('<I7', waits, 7 * i - 6)
      if wait > 0 then
        admitted = 0
      end
      parts = parts .. pack('<I4I7I7I7', remaining, reset, max(wait, peek_rest), 0)
    end
    answer = parts
  end
end
local granted = ''
if up_to then
  granted = pack('<I5', admitted * request_cost)
end

-- A refund writes every limit's state back, and so does a take that counted
-- a cost; the key lives until the last of them holds nothing (exp_all, in
-- ms). A block or a gap that changed is written with the states as they
-- were read, kept as long as they were, or the block and the gap last.
local write = refund or (admitted == 1 and request_cost > 0)
if refund and found and exp_all > 0 then
  -- An adjustment that leaves counts keeps the key at least as long as it
  -- was kept: its end was set under the rule of its last take, which this
  -- one may not see (the twin of Algorithm.keep).
  local ttl = redis.call('PTTL', key)
  if ttl > 0 then
    exp_all = max(exp_all, request_now + ttl)
  end
end
if key_changed and not write and (hold_ms or not peek) then
  -- A block writes the states as they were read, or as a take of 0 reads
  -- them where they were none, or not states of these rules.
  -- States of this layout that the fragment repaired (a count of a
  -- larger MaxFunc above this limit, a time ahead) are kept as read, as
  -- the Storage and memory keep them.
  if hold_ms == nil or stored ~= '' and (not repair or #stored == state_size * n or
      n == 1 and #stored == state_size1) then
    value = stored
  end
  write = true
  local ttl = redis.call('PTTL', key)
  if ttl > 0 then
    exp_all = request_now + ttl
  end
end
if write then
  -- The ends of the call's rules, as every version of these limits writes
  -- them; without either, the ends another version wrote while they last
  -- (see head.lua). A hold in force is both ends (see head.lua).
  if hold_end > request_now then
    value, exp_all = value .. pack('<I6I6', hold_end, hold_end), max(exp_all, hold_end)
  elseif blocking and spacing then
    if block_end == gap_end and block_end > 0 then
      gap_end = gap_end - 1 -- equal ends read as a hold; the block covers the gap's last ms
    end
    value, exp_all = value .. pack('<I6I6', block_end, gap_end), max(exp_all, block_end, gap_end)
  elseif blocking then
    value, exp_all = value .. pack('<I6', block_end), max(exp_all, block_end)
  elseif spacing then
    value, exp_all = value .. pack('<I6', gap_end), max(exp_all, gap_end)
  elseif kept_ends ~= '' and max(block_end, gap_end) > request_now then
    value, exp_all = value .. kept_ends, max(exp_all, block_end, gap_end)
  end
end
if write then
  if exp_all > request_now then
    redis.call('SET', key, value, 'PX', exp_all - request_now)
  else
    redis.call('DEL', key)
  end
elseif repair and not peek and redis.call('PTTL', key) == -1 then
  -- A value that was not a state of these rules, left as it is: it gets
  -- a TTL past any time it can still hold the key off, of the longest
  -- limit: its time may lie ahead (by up to `ahead`), and from there its
  -- state lasts two windows at most, or for a bucket the time to refill
  -- its whole burst.
  local hold = 0
  for i = 1, n do
    local limit, burst, window, step = unpack('<I4I4I7I4', ARGV[1], 26 * i - 13)
    local lasts = max(2 * window, idiv(burst * window + limit - 1, limit))
    hold = max(hold, (max(window, idiv(60000 + step - 1, step)) + lasts) * step)
  end
  redis.call('PEXPIRE', key, hold)
end
-- The answer, packed like the request: flags (1 = allowed, and 2^i when
-- limit i can never admit the request), then for each limit remaining (4
-- bytes), reset, retry and counted (7 each). A refund's is the state it
-- leaves, as a take of cost 0 would see it.
local reply
if n == 1 then
  reply = pack('<BI4I7I7I7', admitted + never, remaining1, reset1, retry1, counted1) .. granted
else
  reply = pack('<B', admitted + never) .. answer .. granted
end
reply = reply .. turn_wait
if peek then
  reply = reply .. pack('<I6', peek_rest)
end
if once and admitted == 1 then
  redis.call('SET', KEYS[2], once_tag .. reply .. pack('<I5B', request_cost, 0), 'PX', once_ms)
end
return reply
