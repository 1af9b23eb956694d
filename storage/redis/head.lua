-- The head of every script: the arguments, the time and the key's value,
-- then the loops over the limits that an algorithm's body runs in, which
-- tail.lua closes before it writes the states back and answers. The scripts
-- are flat (few functions): Redis runs a script's whole chunk on every
-- call, so each local function is a closure made anew each time, which
-- costs more than the arithmetic.
--
-- KEYS[1]: the one key that holds the states of every limit of a limited
-- key, so that one decision reads and writes one key (and Redis Cluster
-- never sees CROSSSLOT). ARGV[1]: the request, packed by the Go side in one
-- string so that it is one argument to pass and one C call to read
-- (little-endian): flags (1 byte: 1 = refund, 2 = use the server's TIME),
-- cost (5 bytes) and now (6, in ms), then for each limit its limit and
-- burst (4 bytes each), window (7), step (4) and counted_in (7). A limit
-- keeps time in whole steps of `step` ms (1 but for very large quotas):
-- its window, its state's times and counted_in are in steps, and its
-- answer is in ms. (Redis 6 and later replicate a script's writes, not the
-- script, so TIME is safe to use.) Numbers are Lua doubles: every integer
-- the scripts form stays below 2^53, where doubles are exact (the Go side
-- checks limit * window <= 2^51, window in steps).
local key = KEYS[1]
local flags, request_cost, request_now = struct.unpack('<BI5I6', ARGV[1])
local n = (#ARGV[1] - 12) / 26
local refund = flags % 2 == 1

-- idiv is floor(a / b) for integers a >= 0 and b > 0, corrected for the
-- rounding of the double division.
local function idiv(x, y)
  local q = math.floor(x / y)
  if q * y > x then
    q = q - 1
  elseif (q + 1) * y <= x then
    q = q + 1
  end
  return q
end

if flags >= 2 then
  local t = redis.call('TIME')
  request_now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The key's value: the states of the limits one after the other, each
-- packed with the struct library (little-endian, a millisecond timestamp in
-- 6 bytes) in its algorithm's layout, so that packing and unpacking are one
-- C call each. A value of an unexpected length reads as no state.
local stored = redis.pcall('GET', key)
if type(stored) == 'table' then
  if string.sub(stored.err or '', 1, 9) ~= 'WRONGTYPE' then
    return stored -- the server's error, as it is
  end
  -- Not a string: another program's key under this name. That is an error
  -- for this key alone; so that it does not hold the key off for good, it
  -- is given the longest window as a TTL if it has none, after which this
  -- script writes its own state there.
  if redis.call('PTTL', key) == -1 then
    local longest = 0
    for i = 1, n do
      local window, step = struct.unpack('<I7I4', ARGV[1], 26 * i - 5)
      longest = math.max(longest, window * step)
    end
    redis.call('PEXPIRE', key, longest)
  end
  return redis.error_reply('WRONGTYPE limiter: the key holds a value of another type, not a rate-limit state')
end
local found = stored ~= false
stored = stored or ''
-- repair is set when what was read is not a state of these rules (see
-- plausible in limits.go): it reads as what it can be, and if the call
-- writes nothing, the key is at least given a TTL.
local repair = false

-- A take is decided in one pass over the limits, with its cost. When a limit
-- rejects it, nothing is counted anywhere, and a second pass decides the
-- limits that would have admitted it again at cost 0, so that their answers
-- describe their state as it stands (the twin of decide in limits.go).
-- value and answer gather each limit's part of the value to write and of
-- the answer (25 bytes a limit), and admits has bit i set when limit i
-- admits: strings and a number, no table to make on every call. A second
-- pass builds its answer in again, keeping the first pass's part of the
-- limits it does not decide again.
local value, answer, again = '', '', ''
local admitted, never, admits, exp_all = 1, 0, 0, 0
for pass = 1, 2 do
  for i = 1, n do
    if pass == 1 or math.floor(admits / 2 ^ i) % 2 == 1 then
      local limit, burst, window, step, counted_in =
        struct.unpack('<I4I4I7I4I7', ARGV[1], 26 * i - 13)
      local at = idiv(request_now, step) -- now in the limit's steps
      -- A state whose time lies further ahead than this was not written
      -- under this rule near now (other steps, or another program): it
      -- reads as no state (the twin of rule.ahead).
      local ahead = math.max(window, idiv(60000 + step - 1, step))
      local cost, now = request_cost, at
      if pass == 2 then
        cost = 0
      end
      -- The body reads limit i's state from stored and sets a, b, c, fmt
      -- and exp: the state to keep, packed by the struct format fmt, which
      -- holds nothing from exp on (a take sets them when it admits, a
      -- refund always). A take's answer is allowed (0 or 1), remaining,
      -- reset and retry (steps; retry < 0 means never) and counted (where
      -- an admitted cost was counted, for a refund).
      local a, b, c, fmt, exp = 0, 0, 0, nil, nil
      local allowed, remaining, reset, retry, counted = 0, 0, 0, 0, 0
