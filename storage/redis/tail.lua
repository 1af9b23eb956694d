
-- The tail of every script: write the state back and answer.
if exp then
  if exp > now then
    redis.call('SET', key, struct.pack(fmt, a, b, c), 'PX', exp - now)
  else
    redis.call('DEL', key)
  end
end
if refund then
  return 1
end
-- The answer, packed like the request: flags (1 = allowed, 2 = never),
-- remaining (4 bytes), reset, retry and counted (7 each).
if retry < 0 then
  allowed, retry = allowed + 2, 0
end
return struct.pack('<BI4I7I7I7', allowed, remaining, reset, retry, counted)
