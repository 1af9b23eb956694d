-- sliding_log_prelude.lua: what the sliding log's script defines before
-- head.lua, which reads a value's layout with it (and batch.go's batch
-- script makes once per batch): log_part. It reads no key or argument and
-- sets nothing else. Its Go counterpart is quota's logValueSize
-- (storage.go), which checks a Storage's log values, of another layout,
-- alike.
-- A value is each limit's log in turn, its entries' count (2 bytes) and
-- then their times (6 bytes each, in steps, oldest first). log_part
-- returns where limit i's log begins in the first len bytes of v (a value
-- of n logs), or nil when those bytes are not n logs.
local function log_part(v, len, n, i)
  local pos, at = 1, nil
  for j = 1, n do
    if pos + 1 > len then
      return nil
    end
    if j == i then
      at = pos
    end
    pos = pos + 2 + 6 * struct.unpack('<I2', v, pos)
  end
  if pos - 1 ~= len then
    return nil
  end
  return at
end
