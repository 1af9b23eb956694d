-- Shared head of every script; an algorithm's functions and the call follow.
-- KEYS[1]: the one key of the limited key (so Redis Cluster never sees
-- CROSSSLOT). ARGV: limit, burst, window, cost, now, unit, mode, counted_in.
-- Times are integers in units of `unit` microseconds; now < 0 means the
-- server's TIME. Numbers are Lua doubles: every integer the scripts form
-- stays below 2^53, where doubles are exact (the Go side picks the unit so).
if redis.replicate_commands then
  pcall(redis.replicate_commands)
end

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
local unit = tonumber(ARGV[6])
local mode = ARGV[7]
local counted_in = tonumber(ARGV[8])

-- idiv is floor(a / b) for integers a >= 0 and b > 0, corrected for the
-- rounding of the double division.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function cdiv(a, b)
  return idiv(a + b - 1, b)
end

if now < 0 then
  local t = redis.call('TIME')
  now = idiv(tonumber(t[1]) * 1000000 + tonumber(t[2]), unit)
end

-- load returns the key's state: three integers, all 0 when there is none.
-- A state is kept with the time it expires, computed when it was written,
-- and is empty from then on, even if the key lingers (TTLs are whole ms)
-- or the rule has changed since (a lower limit refills a bucket slower).
local function load()
  local v = redis.call('GET', key)
  if not v then
    return 0, 0, 0
  end
  local a, b, c, exp = string.match(v, '^(%-?%d+):(%-?%d+):(%-?%d+):(%-?%d+)$')
  if not a or now >= tonumber(exp) then
    return 0, 0, 0
  end
  return tonumber(a), tonumber(b), tonumber(c)
end

-- save keeps the state until exp, with a TTL of exactly that (in whole ms,
-- rounded up), or removes the key when the state holds nothing any more.
local function save(a, b, c, exp)
  if exp > now then
    redis.call('SET', key, string.format('%d:%d:%d:%d', a, b, c, exp), 'PX', cdiv((exp - now) * unit, 1000))
  else
    redis.call('DEL', key)
  end
end
