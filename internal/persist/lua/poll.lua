-- poll.lua: the owner's periodic step for its partitions: per partition,
-- announce the new loaded-until time, hand back the inbox, and read the
-- first page of the pending set over (previous loaded-until, new
-- loaded-until]; the caller reads the rest of the window, if any, with
-- range.lua. One call serves any number of partitions (outside a Cluster
-- all of a process's; in a Cluster one, its keys in one slot), each on its
-- own: one that is fenced or fails leaves the others as they are.
--
-- KEYS in groups of 5, one group per partition:
--   +0  lease STRING
--   +1  loaded STRING (unix µs)
--   +2  inbox LIST
--   +3  pending ZSET
--   +4  running HASH (claim markers; a reset drops the old owner's)
-- ARGV[1]  new loaded-until time (unix µs), the window's end; it never
--          moves back
-- ARGV[2]  time to live of the loaded keys, ms (they lapse with the owner)
-- ARGV[3]  most inbox entries to return per partition
-- ARGV[4]  most pending entries to return per partition (the first page
--          of its window); 0 reads none
-- ARGV[5]  the window's start when there is no previous announcement:
--          below every due time
-- ARGV from 6 on, 3 per partition:
--   +0  the caller's lease token
--   +1  "reset" on taking the partition over (the caller will scan
--       everything up to ARGV[1], so the inbox is dropped, and so are the
--       claim markers of runs of the previous owner), else ""
--   +2  where the caller's last window scanned whole ended (unix µs): the
--       window starts at the earlier of it and the previous announcement
--
-- Returns {head, item, item, ...}. head has one field per partition, in
-- order, joined by '|':
--   "F"                 fenced: the caller does not hold the lease; nothing
--                       was done
--   "E"                 the partition's step failed; one item, the error
--   "prev,nin,npage"    prev the previous loaded-until ("" when none, or
--                       on a reset; "=" when it is the partition's ARGV +2,
--                       as it is after a window scanned whole, so that an
--                       idle poll's reply is short), nin inbox entries
--                       (with a "+" after it when the inbox held ARGV[3]
--                       or more: it may hold more), then npage pending
--                       entries of the window, each as two items (job key,
--                       score); npage is -1 when the window was not read
--                       (empty, or ARGV[4] is 0)
-- The items follow in the order of the fields. many() is lib.lua's,
-- which the store puts before this script.
local new, ttl, maxInbox, page, floor = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local head, out = {}, {''}
local inboxCap = tonumber(maxInbox)

local function step(k, a)
  if redis.call('GET', KEYS[k]) ~= ARGV[a] then
    return 'F'
  end
  local reset = ARGV[a + 1] == 'reset'
  local prev = redis.call('GET', KEYS[k + 1])
  local announce = new -- kept a string: Lua would print a 16-digit number as 1.7e+15
  if reset then
    redis.call('DEL', KEYS[k + 2])
    -- The old owner's claim marks: its runs were interrupted (their
    -- outcomes were never stored). They become "!", no owner: the jobs
    -- are claimable, and their next runs are reruns (see claim.lua).
    -- Reservations ("~" and a token) are no owner's: they stay, and lapse
    -- by their deadlines (due.lua).
    local marked = redis.call('HGETALL', KEYS[k + 4])
    for i = 1, #marked, 2 do
      if string.sub(marked[i + 1], 1, 1) ~= '~' then
        redis.call('HSET', KEYS[k + 4], marked[i], '!')
      end
    end
    prev = false
  elseif prev and tonumber(prev) > tonumber(new) then
    announce = prev
  end
  redis.call('SET', KEYS[k + 1], announce, 'PX', ttl)
  local nin, more = 0, ''
  if not reset then
    local keys = redis.call('LPOP', KEYS[k + 2], maxInbox)
    if keys and #keys > 0 then -- a count of 0 pops an empty array
      if #keys >= inboxCap then
        more = '+'
      end
      -- One ZMSCORE, not a ZSCORE per entry: a poll after a burst of
      -- Schedules by others holds thousands.
      local scores = many('ZMSCORE', KEYS[k + 3], keys)
      for j, key in ipairs(keys) do
        local s = scores[j]
        if s then
          out[#out + 1] = key
          out[#out + 1] = s
          nin = nin + 1
        end
      end
    end
  end
  local npage = -1
  local after = floor
  if prev then
    after = ARGV[a + 2]
    if tonumber(prev) < tonumber(after) then
      after = prev
    end
  end
  if page > 0 and tonumber(after) < tonumber(new) then
    local es = redis.call('ZRANGEBYSCORE', KEYS[k + 3], '(' .. after, new, 'WITHSCORES', 'LIMIT', 0, page)
    for _, v in ipairs(es) do
      out[#out + 1] = v
    end
    npage = #es / 2
  end
  if prev == ARGV[a + 2] then
    prev = '='
  end
  return (prev or '') .. ',' .. nin .. more .. ',' .. npage
end

local a = 6
for k = 1, #KEYS, 5 do
  local mark = #out
  local ok, res = pcall(step, k, a)
  if ok then
    head[#head + 1] = res
  else
    for i = #out, mark + 1, -1 do -- drop what the failed step put in
      out[i] = nil
    end
    head[#head + 1] = 'E'
    if type(res) == 'table' then
      res = res.err
    end
    out[#out + 1] = tostring(res)
  end
  a = a + 3
end
out[1] = table.concat(head, '|')
return out
