-- forget_record.lua: a script of its own (no head or tail), run when the
-- cost of an idempotent take is given back. Inputs: KEYS[1], the limited
-- key, and KEYS[2], the take's record; no ARGV. Output: 1 or 0, below.
-- The twin of quota's idempotencyCache.forget (idempotency.go); head.lua
-- and tail.lua read and write the record it changes.
--
-- Makes the record a take once per request keeps (KEYS[2], in the hash
-- slot of the limited key, KEYS[1], by which the call is routed as the
-- take is, on a Cluster and on a Ring) answer no more repeats, so that a
-- retry of a request whose cost is given back is decided as a new one;
-- unless the record has answered repeats already (its last byte, see
-- head.lua): those were served on the take, which then keeps its cost.
-- Answers 1 when it stays for that, else 0. A value that is not a record,
-- as head.lua reads one (its tag, a length of one to four limits' answers,
-- an admission's flags), answered no repeats and is dropped.
local record = redis.pcall('GET', KEYS[2])
if type(record) == 'string' and #record >= 38 and #record <= 113 and (#record - 13) % 25 == 0 and
    string.sub(record, 1, 6) == 'once3\0' and string.byte(record, 7) % 2 == 1 then
  if string.byte(record, #record) > 0 then
    return 1
  end
  -- Kept, answering no more repeats (8, the most: see head.lua), rather
  -- than dropped: a later take of the request that replaced the record
  -- (its ninth repeat, counted afresh) is then not given back too, as its
  -- record has answered for it (the twin of idempotencyCache.forget).
  redis.call('SET', KEYS[2], string.sub(record, 1, #record - 1) .. '\8', 'KEEPTTL')
  return 0
end
redis.call('DEL', KEYS[2])
return 0
