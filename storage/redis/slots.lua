-- Concurrency slots (redisengine.SlotEngine.AcquireSlot, slots.go): KEYS[1]
-- is a sorted set of the requests in flight of one limited key, each
-- member a request's id, its score the slot's expiry in ms of Redis's
-- clock. ARGV: the id, max slots, the expiry (ms from now), and now (ms;
-- empty for TIME). The answer: {1 when the id got a slot else 0, slots
-- taken after the call}.
local key, id = KEYS[1], ARGV[1]
local max, ttl = tonumber(ARGV[2]), ARGV[3]
local now = tonumber(ARGV[4])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A slot whose expiry has passed belongs to a request that never released
-- it (its process died, say): it is free again.
local gone = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', now)
if type(gone) == 'table' then
  if string.sub(gone.err or '', 1, 9) ~= 'WRONGTYPE' then
    return gone -- the server's error, as it is
  end
  -- Another program's value under this name: an error for this key alone.
  -- It gets the slots' expiry as a TTL if it has none or a longer one, so
  -- that it does not hold the key off for good; then a set takes its place.
  local pttl = redis.call('PTTL', key)
  if pttl == -1 or pttl > tonumber(ttl) then
    redis.call('PEXPIRE', key, ttl)
  end
  return redis.error_reply('WRONGTYPE limiter: the key holds a value of another type, not concurrency slots')
end

-- A score further ahead than any slot's expiry can lie (2^50 ms, the
-- longest Expiration slots.go sends) is not a slot: another program's
-- member, which would hold a slot for as long as the key lives.
redis.call('ZREMRANGEBYSCORE', key, '(' .. string.format('%.0f', now + 1125899906842624), '+inf')
local taken = redis.call('ZCARD', key)
if taken >= max then
  -- A set without a TTL was not written by this script (it gives every
  -- set one): it gets the slots' expiry, so that it cannot hold the key
  -- off for good.
  if redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, ttl)
  end
  return {0, taken}
end
redis.call('ZADD', key, string.format('%.0f', now + tonumber(ttl)), id)
-- The key lives until its latest slot expires: this one, unless another
-- limiter's (a longer expiry) ends later.
if redis.call('PTTL', key) < tonumber(ttl) then
  redis.call('PEXPIRE', key, ttl)
end
return {1, taken + 1}
