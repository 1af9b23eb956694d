-- The head of every script: the arguments, the time and the key's value.
-- An algorithm's body follows, then tail.lua. The scripts are flat (few
-- functions): Redis runs a script's whole chunk on every call, so each local
-- function is a closure made anew each time, which costs more than the
-- arithmetic.
--
-- KEYS[1]: the one key of the limited key (so Redis Cluster never sees
-- CROSSSLOT). ARGV: limit, burst, window, cost, now, mode, counted_in.
-- Times are integers in milliseconds; now < 0 means the server's TIME
-- (Redis 6 and later replicate a script's writes, not the script, so TIME
-- is safe to use). Numbers are Lua doubles: every integer the scripts form
-- stays below 2^53, where doubles are exact (the Go side checks
-- limit * window <= 2^51).
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
local refund = ARGV[6] == 'refund'
local counted_in = tonumber(ARGV[7])

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

if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The key's stored state, decoded by the body: integers packed with the
-- struct library (little-endian, a millisecond timestamp in 6 bytes), so a
-- value stays within the 12 bytes Redis keeps inline with its object, and
-- packing and unpacking are one C call each. A value of an unexpected length
-- reads as no state.
local stored = redis.call('GET', key) or ''

-- The body sets exp to write the state back, packed by the struct format
-- fmt from a, b, c, with a TTL until exp, or to remove the key when exp is
-- not in the future; nil leaves the key as it is. It sets result to what
-- the script returns.
local a, b, c, fmt, exp, result = 0, 0, 0, nil, nil, nil
