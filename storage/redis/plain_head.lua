-- plain_head.lua: the head of the plain take, which head.lua runs right
-- after reading the request: a take (no refund, penalty, reward, up_to or
-- once) of one limit, without BlockFor or MinInterval, with no second
-- argument (a turn or an operator's call), on a key that holds nothing or
-- exactly one state of this algorithm. That is most calls, and it costs
-- Redis far less decided here: no loops over passes and limits, and one
-- C call each to read the state and pack the answer. Then the
-- algorithm's plain fragment (fixed_window_plain.lua, ...) decides, as
-- its general fragment would for such a call, and plain_tail.lua writes
-- and answers. A call or a value it does not take (a state it finds
-- implausible, another type, ends of a BlockFor) goes on to the general
-- path below, which decides it afresh. A script's whole chunk is compiled
-- once; what a call does not reach costs it nothing.
--
-- The fragment reads key, stored (the value: false or state_size1
-- bytes), request_now, request_cost and the first limit's rule (limit1,
-- burst1, window1, step1), and at and ahead as head.lua's loop sets them;
-- and sets value and px (a value to write, and the ms from request_now
-- it must last; value nil: nothing to write), allowed (1 or 0;
-- 2 for a cost the limit can never admit), remaining and reset, retry and
-- counted (in steps, as the general fragment's), or plain = false to
-- leave the call to the general path.
if flags % 2 == 0 and flags <= 2 and #ARGV == 1 and #ARGV[1] == 38 then
  if flags == 2 then
    local t = redis.call('TIME')
    request_now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
    flags = 0 -- read once: the general path reads no other time
  end
  read = redis.pcall('GET', key)
  local stored = read
  if not stored or #stored == state_size1 then
    local at, ahead = request_now, max(window1, 60000)
    if step1 > 1 then
      at, ahead = idiv(request_now, step1), max(window1, idiv(60000 + step1 - 1, step1))
    end
    local plain, value, px = true, nil, 0
    local allowed, remaining, reset, retry, counted = 0, 0, 0, 0, 0
