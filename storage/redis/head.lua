-- head.lua: the head of every algorithm's script. A script is the line
-- scripts.go's stateSizes writes (state_size and state_size1: the bytes
-- of a limit's state in a value of n limits, and of a lone limit's; -1 for
-- a log), sliding_log_prelude.lua for the log, this file, the algorithm's
-- fragment (fixed_window.lua, sliding_window.lua, token_bucket.lua or
-- sliding_log.lua), then tail.lua. This file reads the request and the
-- key's value and opens the loops over the passes and the limits; the
-- fragment is the loops' body; tail.lua closes them, writes the value back
-- and answers. The scripts are flat (few functions): Redis runs a script's
-- whole chunk on every call, so each local function is a closure made
-- anew each time, which costs more than the arithmetic.
--
-- Inputs. KEYS[1]: the one key that holds the states of every limit of a
-- limited key, so that one decision reads and writes one key (and Redis
-- Cluster never sees CROSSSLOT). KEYS[2], for a take once per request
-- only: its record (see once below). ARGV[1]: the request, packed by the
-- Go side (wire.go) in one string so that it is one argument to pass and
-- one C call to read (little-endian): flags (1 byte: 1 = refund, 2 = use
-- the server's TIME, 4 = penalty, 8 = reward, 16 = up_to, 32 = blocking,
-- 64 = spacing, 128 = once; see each below), cost (5 bytes) and now (6,
-- in ms), then for each limit its limit and burst (4 bytes each), window
-- (7), step (4) and counted_in (7), then block_ms, gap_ms and once_ms (6
-- bytes each, when their flag is set). A limit keeps time in whole steps
-- of `step` ms (1 but for very large quotas): its window, its state's
-- times and counted_in are in steps, and its answer is in ms. (Redis 6
-- and later replicate a script's writes, not the script, so TIME is safe
-- to use.) Numbers are Lua doubles: every integer the scripts form stays
-- below 2^53, where doubles are exact (the Go side checks limit * window
-- <= 2^51, window in steps).
--
-- The contract of head, fragment and tail. The fragment runs for limit i
-- of n on each pass (pass 0: a look that counts nothing, up_to's at the
-- room, at cost 0, or a held call's at the wait for its cost; pass 1: the
-- take or the adjustment; pass 2: a limit that admitted, decided again at
-- cost 0 because another rejected). This file declares, and the
-- fragment reads:
--   limit, burst, window, step, counted_in  limit i's rule (in steps)
--   at           the request's time in the limit's steps
--   now          at, which the fragment may raise (time never goes back
--                for a key)
--   ahead        how far past now a state's time may lie and still be
--                read (the twin of rule.tooFarAhead)
--   cost         the units to take on pass 1 (0 for a call held by a
--                block or a gap), a held call's on pass 0, else 0
--   stored       the key's value without its rules' ends ('' for none),
--                and found, whether the key held one
--   refund       the call adjusts rather than takes: penalize or reward
--                say which adjustment, else the refund of counted_in
--   i, n, and the library locals below (idiv, floor, max, min, pack,
--   unpack, sub); the log's fragment also log_part, from its prelude.
-- The fragment sets, for tail.lua to read (declared below, per limit):
--   a, b, c, fmt  the state to keep, pack(fmt, a, b, c); or part, packed
--                already (a log)
--   exp          when (steps) that state holds nothing; nil when nothing
--                of this limit is to be written (a take it rejects)
--   allowed      1 when the limit admits the take, else 0
--   remaining, reset, retry  its answer (steps; retry < 0: never)
--   counted      where an admitted cost was counted (Decision.countedIn)
--   repair       set to true when stored is not a state of these rules
--   now, turn    the time (steps) the limit decided at, the key's clock:
--                now raised to the state's time when that lies ahead, or
--                turn when the fragment keeps it apart (the bucket's last)
-- A fragment's own locals shadow none of these names, and it changes no
-- other of this file's.
--
-- The Go twins of this file, in quota: Algorithm.decideRead's passes and
-- decideUpToInto's pass 0 (limits.go), rule.tooFarAhead (decision.go),
-- decideKeyInto and decideEnds reading and clamping the key's ends, and
-- rejectHeld's look at the wait, keyEnds.read (a hold), peekInto and
-- holdUntil (an operator's call) (block.go), limits.stored and
-- decodeStates (the ends another version wrote), and
-- idempotencyCache.take (a record's repeats).
-- The library functions the scripts call, as locals: a global's lookup on
-- every use costs more than the call. idiv is floor(a / b) for integers
-- a >= 0 and b > 0, corrected for the rounding of the double division.
local floor, max, min = math.floor, math.max, math.min
local pack, unpack, sub = struct.pack, struct.unpack, string.sub
-- flag[i] is 2^i, the flag of limit i, without a call to pow.
local flag = {2, 4, 8, 16, 32, 64, 128, 256}
local function idiv(x, y)
  local q = floor(x / y)
  if q * y > x then
    q = q - 1
  elseif (q + 1) * y <= x then
    q = q + 1
  end
  return q
end
-- What follows runs once per call; a batch script (batch.go) makes what
-- comes before once per batch.
local key = KEYS[1]
-- The request, and the first limit's rule in the same C call (a struct call
-- costs more than the arithmetic of a decision).
local flags, request_cost, request_now, limit1, burst1, window1, step1, counted_in1 =
  unpack('<BI5I6I4I4I7I4I7', ARGV[1])
-- The plain take, most calls, when the algorithm has one (plain_head.lua);
-- read is what it read of the key when it leaves the call to what follows.
local read = nil
-- [plain take]
-- The rules of the key beside its limits' counts (the twin of
-- decideKeyInto): blocking (flag 32), a BlockFor of block_ms, and spacing
-- (flag 64), a MinInterval of gap_ms, each in 6 bytes after the rules, in
-- that order. The key's value then ends with the block's end and the end
-- of the gap since its last admitted take (6 bytes each, ms, in the same
-- order), each when the call has its rule (see below for other values).
local blocking, spacing = floor(flags / 32) % 2 == 1, floor(flags / 64) % 2 == 1
local rules_end, block_ms, gap_ms = #ARGV[1], 0, 0
-- once (flag 128): a take made once per request (its idempotency key).
-- An admitted one's answer is kept in the call's second key, of the same
-- hash slot, for once_ms (6 bytes, last of all), followed by the cost it
-- admitted (5 bytes) and how many repeats it has answered (1 byte): a
-- repeat of at most that cost gets that answer again, with one byte more
-- that marks it, and counts nothing, up to 8 repeats (the twin of
-- maxRepeats); the next, or one of a larger cost, counts as a new request.
-- A record begins with once_tag, which names its layout, and is exactly
-- as long as one for this call's limits (the answer is 1 + 25 bytes a
-- limit), its flags those of an admission: any other value (another
-- layout's, another program's, of another type) answers nothing, and an
-- admitted take's record replaces it. The twin of forget_record.lua. Never
-- in a batch.
local once, once_ms, once_tag = flags >= 128, 0, 'once3\0'
if once then
  rules_end = rules_end - 6
  once_ms = unpack('<I6', ARGV[1], rules_end + 1)
  local limits = (rules_end - 12 - (blocking and 6 or 0) - (spacing and 6 or 0)) / 26
  local first = redis.pcall('GET', KEYS[2])
  if type(first) == 'string' and #first == 13 + 25 * limits and sub(first, 1, 6) == once_tag and
      string.byte(first, 7) % 2 == 1 then
    local first_answer = sub(first, 7, #first - 6)
    local first_cost, repeats = unpack('<I5B', first, #first - 5)
    if repeats < 8 and request_cost <= first_cost then
      redis.call('SET', KEYS[2], once_tag .. first_answer .. pack('<I5B', first_cost, repeats + 1), 'KEEPTTL')
      return first_answer .. '\1'
    end
  end
end
if spacing then
  rules_end = rules_end - 6
  gap_ms = unpack('<I6', ARGV[1], rules_end + 1)
end
if blocking then
  rules_end = rules_end - 6
  block_ms = unpack('<I6', ARGV[1], rules_end + 1)
end
local n = (rules_end - 12) / 26
-- refund: the call gives units back or counts them outside a take, and
-- answers as a take of cost 0 would; as a penalty (flag 4), it counts cost
-- up to the whole quota; as a reward (flag 8), it gives cost back from
-- what is spent now, whichever window counted it; else it gives back the
-- cost of an admitted take, in the window counted_in names.
local refund = flags % 2 == 1
local penalize, reward = floor(flags / 4) % 2 == 1, floor(flags / 8) % 2 == 1
-- up_to (flag 16): a take of as much of cost as every limit has room for
-- now (room, the least Remaining, found by a pass 0 at cost 0), and when
-- none has any, a take of 1 that is rejected; the answer ends with what
-- was granted (5 bytes).
local up_to, room = floor(flags / 16) % 2 == 1, -1
-- A take with a turn (a second argument, turn_arg: max_delay, 6 bytes,
-- ms): one that may wait up to max_delay for its turn (the twin of
-- decideTurnInto in quota). It is decided at the key's clock, the latest
-- time a limit's state holds (the fragments' turn, or their raised now),
-- and when a limit rejects it there, again where every limit's retry says
-- it fits, up to 4 tries, each a pass 1 (and 2) at request_now moved to
-- that time; the call's own time stays real_now. An admitted take's
-- answer ends with its wait (6 bytes, ms; 0 for a cost of 0, decided as
-- a take); a rejected one's retries are measured from real_now. Never with up_to, once, blocking or spacing;
-- never batched.
local turn_arg = ARGV[2]
-- An operator's call (quota's Peek and Block): a second argument of 1
-- byte, a peek, or of 7, a block ('b', then hold_ms, 6 bytes). It decides
-- a take of request_cost (1) as a held call looks at one (pass 0), then
-- at cost 0 (pass 1), and counts nothing: its answer is each limit's
-- state, its retry the wait of the take, admitted when the take would be,
-- and then how long the key is held off whatever its counts (6 bytes,
-- ms: a hold, a block, or the gap for a take of a cost). A peek writes
-- nothing; a block holds the key until request_now + hold_ms (see
-- hold_end below), and answers as a peek after it. Never batched.
local peek, hold_ms = false, nil
if turn_arg and #turn_arg ~= 6 then
  peek = true
  if #turn_arg == 7 then
    hold_ms = unpack('<I6', turn_arg, 2)
  end
  turn_arg = nil
end
local max_delay, tries = -1, 1
if turn_arg and request_cost > 0 then
  max_delay, tries = unpack('<I6', turn_arg), 4 -- a cost of 0 waits for nothing
end
-- The first pass: 0, a look that counts nothing, for up_to and for a held
-- call (see below); else 1.
local first_pass = 1
if up_to then
  first_pass = 0
end

if floor(flags / 2) % 2 == 1 then
  local t = redis.call('TIME')
  request_now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
end

-- The key's value: the states of the limits one after the other, each
-- packed with the struct library (little-endian, a millisecond timestamp in
-- 6 bytes) in its algorithm's layout, so that packing and unpacking are one
-- C call each. A value of an unexpected length reads as no state.
local stored = read
if stored == nil then
  stored = redis.pcall('GET', key)
end
if type(stored) == 'table' then
  if sub(stored.err or '', 1, 9) ~= 'WRONGTYPE' then
    return stored -- the server's error, as it is
  end
  -- Not a string: another program's key under this name. That is an error
  -- for this key alone; so that it does not hold the key off for good, it
  -- is given the longest window as a TTL if it has none or a longer one,
  -- after which this script writes its own state there.
  local longest = 0
  for i = 1, n do
    local window, step = unpack('<I7I4', ARGV[1], 26 * i - 5)
    longest = max(longest, window * step)
  end
  local ttl = redis.call('PTTL', key)
  if ttl == -1 or ttl > longest then
    redis.call('PEXPIRE', key, longest)
  end
  return redis.error_reply('WRONGTYPE limiter: the key holds a value of another type, not a rate-limit state')
end
-- An end further ahead than a block or a gap lasts was not set under these
-- settings near now: it holds the key no longer than they would. While the
-- block lasts, or the gap for a take of a cost, the call is held: it
-- decides as a take of 0 and is then rejected for reject_rest ms, the rest
-- of the block and of the gap (see below), or longer when a limit has no
-- room for its cost by then: pass 0 looks at the take of held_cost, and
-- each limit's retry there is its wait (the twin of rejectHeld).
local block_end, gap_end, key_changed, reject_rest, held_cost = 0, 0, false, nil, 0
-- An operator's hold (quota's Block): until hold_end (ms), every call is
-- held, whatever its rules, as a block is; a block's rules end it no
-- sooner. A value keeps it as both ends of 12 bytes, the block's and the
-- gap's each hold_end: a version that knows no holds and has neither rule
-- keeps such ends as they are while they last, for the versions that
-- enforce them (a version with BlockFor reads them as a block, which it
-- shortens to its own; one with MinInterval alone, as a gap). A block and
-- a gap that would end on one ms are written a ms apart (tail.lua; the
-- block covers the gap's last ms), so equal ends are a hold's alone. A
-- hold further ahead than the longest block (max_end_ms) was not set near
-- now: it holds nothing.
local hold_end = 0
-- Every version of these limits reads the others' values: a value is the
-- states of the limits (state_size each, from the line before head.lua;
-- for a log, state_size < 0, the logs of sliding_log_prelude.lua, of any
-- length), or nothing, then the ends of the writer's rules, 12 bytes (a
-- block's and a gap's), 6 (one of them) or none. So a deploy that turns
-- BlockFor or MinInterval on or off keeps the counts while both versions
-- serve. Which rule 6 bytes end is the writer's: read as the block's by a
-- call that blocks and does not space, else as the gap's; a call without
-- either keeps them as they are, while they last (max_end_ms), for the
-- replicas that enforce them (kept_ends). The lengths cannot be mistaken
-- for one another: no two lengths of states differ by 6 or 12 but a lone
-- sliding window's 12, which reads as states.
local kept_ends, max_end_ms = '', 31536000000
local len = stored and #stored or 0
if len > 0 and len ~= state_size * n and not (n == 1 and len == state_size1) and
    not (state_size < 0 and log_part(stored, len, n, 1)) then
  -- Not states alone (the common case, checked above without a closure).
  local function fits(size)
    return size == 0 or size == state_size * n or n == 1 and size == state_size1 or
      state_size < 0 and size > 0 and log_part(stored, size, n, 1) ~= nil
  end
  if len >= 12 and fits(len - 12) then
    block_end, gap_end = unpack('<I6I6', stored, len - 11)
    kept_ends, stored = sub(stored, len - 11), sub(stored, 1, len - 12)
    if block_end == gap_end and block_end > 0 then
      hold_end, block_end, gap_end = block_end, 0, 0
      if hold_end > request_now + max_end_ms then
        hold_end = 0
      end
    end
  elseif len >= 6 and fits(len - 6) then
    if blocking and not spacing then
      block_end = unpack('<I6', stored, len - 5)
    else
      gap_end = unpack('<I6', stored, len - 5)
    end
    kept_ends, stored = sub(stored, len - 5), sub(stored, 1, len - 6)
  end
  if max(block_end, gap_end) > request_now + max_end_ms then
    kept_ends = '' -- ends no rule could have set: not kept
  end
end
if blocking and block_end > request_now + block_ms then
  block_end, key_changed = request_now + block_ms, true
end
if spacing and gap_end > request_now + gap_ms then
  gap_end, key_changed = request_now + gap_ms, true
end
if hold_ms then
  -- A block: the hold ends hold_ms from now, or with a block that ends
  -- later; it takes the place of the block and of the gap.
  hold_end, key_changed = request_now + hold_ms, true
  if blocking and block_end > hold_end then
    hold_end = block_end
  end
  block_end, gap_end = 0, 0
end
local blocked_now = false
if not refund then
  -- The gap's rest, which a take of a cost waits out even when a block
  -- ends first (it would be rejected for the gap then).
  local gap_rest = 0
  if spacing and request_cost > 0 then
    gap_rest = gap_end - request_now
  end
  local held_to = hold_end
  if blocking then
    held_to = max(held_to, block_end)
  end
  if held_to > request_now then
    reject_rest, blocked_now = max(held_to - request_now, gap_rest), true
  elseif gap_rest > 0 then
    reject_rest = gap_rest
  end
  if reject_rest or peek then
    held_cost, request_cost, first_pass, tries = request_cost, 0, 0, 1
    if up_to then
      held_cost = min(held_cost, 1) -- a take up to a cost waits for one unit
    end
  end
end
-- A peek's rest of a hold, a block or a gap; it is no held call.
local peek_rest = 0
if peek then
  peek_rest, reject_rest = reject_rest or 0, nil
end
local found = stored ~= false
stored = stored or ''
-- repair is set when what was read is not a state of these rules (see
-- plausibleAll in limits.go): it reads as what it can be, and if the call
-- writes nothing, the key is at least given a TTL.
local repair = false

-- A take is decided in one pass over the limits, with its cost. When a limit
-- rejects it, nothing is counted anywhere, and a second pass decides the
-- limits that would have admitted it again at cost 0, so that their answers
-- describe their state as it stands (the twin of decide in limits.go).
-- value and answer gather each limit's part of the value to write and of
-- the answer (25 bytes a limit), and admits has bit i set when limit i
-- admits: strings and a number, no table to make on every call. A second
-- pass builds its answer in again, keeping the first pass's part of the
-- limits it does not decide again. waits gathers a held call's wait of
-- each limit (pass 0; 7 bytes a limit, wait1 for a lone one).
local value, answer, again, waits, wait1 = '', '', '', '', 0
local admitted, never, admits, exp_all = 1, 0, 0, 0
-- With one limit, its answer is kept in these and packed with the flags in
-- one call at the end.
local remaining1, reset1, retry1, counted1 = 0, 0, 0, 0
-- A take with a turn: clock is the key's clock at request_now (ms), and
-- later when every limit admits the take (-1: never).
local real_now, clock, later, turn_rejected = request_now, 0, 0, false
for try = 1, tries do
if try > 1 then
  value, answer, again = '', '', ''
  admitted, never, admits, exp_all = 1, 0, 0, 0
end
clock, later = request_now, request_now + 1
for pass = first_pass, 2 do
  for i = 1, n do
    if pass <= 1 or floor(admits / flag[i]) % 2 == 1 then
      local limit, burst, window, step, counted_in = limit1, burst1, window1, step1, counted_in1
      if i > 1 then
        limit, burst, window, step, counted_in = unpack('<I4I4I7I4I7', ARGV[1], 26 * i - 13)
      end
      -- now in the limit's steps; a state whose time lies further ahead
      -- than `ahead` was not written under this rule near now (other steps,
      -- or another program): it reads as no state (the twin of rule.tooFarAhead).
      local at, ahead = request_now, max(window, 60000)
      if step > 1 then
        at, ahead = idiv(request_now, step), max(window, idiv(60000 + step - 1, step))
      end
      local cost, now = request_cost, at
      if pass == 0 then
        cost = held_cost
      elseif pass == 2 then
        cost = 0
      end
      -- What the fragment sets (see the contract at the top): the state
      -- to keep (a take sets it when it admits, an adjustment always) and
      -- limit i's answer.
      -- turn: where the fragment decided (steps), when not its now.
      local a, b, c, fmt, exp, part, turn = 0, 0, 0, nil, nil, nil, nil
      local allowed, remaining, reset, retry, counted = 0, 0, 0, 0, 0
