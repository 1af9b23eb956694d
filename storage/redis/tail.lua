
-- The tail of every script: write the state back and answer.
if exp then
  if exp > now then
    local value = ''
    for _, n in ipairs({a, b, c}) do
      while n >= 128 do
        local low = n % 128
        value = value .. string.char(low + 128)
        n = (n - low) / 128
      end
      value = value .. string.char(n)
    end
    redis.call('SET', key, value, 'PX', exp - now)
  else
    redis.call('DEL', key)
  end
end
return result
