-- Drops the record a take once per request keeps (KEYS[2], in the hash
-- slot of the limited key, KEYS[1], by which the call is routed as the
-- take is, on a Cluster and on a Ring), so that a retry of a request whose
-- cost is given back is decided as a new one; unless the record has
-- answered repeats already (its last byte, see head.lua): those were
-- served on the take, which then keeps its cost, and the record stays.
-- Answers 1 when it stayed for that, else 0.
local record = redis.call('GET', KEYS[2])
if record and #record >= 32 and (#record - 7) % 25 == 0 and string.byte(record, #record) > 0 then
  return 1
end
redis.call('DEL', KEYS[2])
return 0
