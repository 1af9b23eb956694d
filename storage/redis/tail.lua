
-- The tail of every script: write the state back and answer.
if exp then
  if exp > now then
    local bytes = {}
    for _, n in ipairs({a, b, c}) do
      while n >= 128 do
        local low = n % 128
        bytes[#bytes + 1] = low + 128
        n = (n - low) / 128
      end
      bytes[#bytes + 1] = n
    end
    local value = string.char(unpack(bytes))
    redis.call('SET', key, value, 'PX', exp - now)
  else
    redis.call('DEL', key)
  end
end
return result
