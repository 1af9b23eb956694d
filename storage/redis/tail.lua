
-- The tail of every script: write the state back and answer.
if exp then
  if exp > now then
    redis.call('SET', key, struct.pack(fmt, a, b, c), 'PX', exp - now)
  else
    redis.call('DEL', key)
  end
end
return result
