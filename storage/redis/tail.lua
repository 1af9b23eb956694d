
-- The tail of every script: write the state back and answer.
if exp then
  if exp > now then
    local bytes, m = {}, 0
    for i = 1, 3 do
      local n = c
      if i == 1 then
        n = a
      elseif i == 2 then
        n = b
      end
      while n >= 128 do
        local low = n % 128
        m = m + 1
        bytes[m] = low + 128
        n = (n - low) / 128
      end
      m = m + 1
      bytes[m] = n
    end
    local value = string.char(unpack(bytes))
    redis.call('SET', key, value, 'PX', exp - now)
  else
    redis.call('DEL', key)
  end
end
return result
