-- The head of every script: the arguments, the time and the key's value.
-- An algorithm's body follows, then tail.lua. The scripts are flat (few
-- functions): Redis runs a script's whole chunk on every call, so each local
-- function is a closure made anew each time, which costs more than the
-- arithmetic.
--
-- KEYS[1]: the one key of the limited key (so Redis Cluster never sees
-- CROSSSLOT). ARGV[1]: the request, packed by the Go side in one string so
-- that it is one argument to pass and one C call to read (little-endian):
-- flags (1 byte: 1 = refund, 2 = use the server's TIME), limit and burst
-- (4 bytes each), window (7), cost (5), now (6) and counted_in (7). Times
-- are integers in milliseconds (Redis 6 and later replicate a script's
-- writes, not the script, so TIME is safe to use). Numbers are Lua doubles:
-- every integer the scripts form stays below 2^53, where doubles are exact
-- (the Go side checks limit * window <= 2^51).
local key = KEYS[1]
local flags, limit, burst, window, cost, now, counted_in =
  struct.unpack('<BI4I4I7I5I6I7', ARGV[1])
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
-- not in the future; nil leaves the key as it is. A take's answer is
-- allowed (0 or 1), remaining, reset and retry (ms; retry < 0 means never)
-- and counted (where an admitted cost was counted, for a refund).
local a, b, c, fmt, exp = 0, 0, 0, nil, nil
local allowed, remaining, reset, retry, counted = 0, 0, 0, 0, 0
