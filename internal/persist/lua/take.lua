-- take.lua: reserve (or pop) up to a number of due jobs of some pulled topics
-- from the ready ZSETs of one or more partitions, oldest first (outside
-- Redis Cluster one call covers every partition; in a cluster, one). Any
-- process may call it: it is not fenced by a lease, since a reservation
-- is fenced by its own token (resolve.lua) and lapses by its deadline
-- (due.lua, run by the partition's owner).
--
-- KEYS     groups of 8 + nt, one per partition: pending ZSET, jobs HASH,
--          running HASH (marks), paused HASH, lease STRING, inbox LIST,
--          history ZSET, history HASH (the run history: see finished),
--          then the ready ZSET of each of the nt topics, in the order of
--          ARGV's topics
-- ARGV[1]  now, unix µs: only jobs due by then are taken
-- ARGV[2]  the most jobs to take
-- ARGV[3]  the reservations' deadline, unix µs
-- ARGV[4]  the caller's nonce: job j's token is its record's revision in
--          hex (8 characters), the nonce and j
-- ARGV[5]  a byte budget: once the records taken reach it, no more is
--          taken (the first is taken whatever its size)
-- ARGV[6]  nt
-- ARGV[7]  the caller's lease token ("" if none): in a partition whose
--          lease it holds, the caller arms the deadlines itself (no inbox
--          push)
-- ARGV[8]  "p" to pop: each job taken is finished at once (it leaves the
--          queue for the run history as done, as an ack does) instead of
--          reserved, and its token is ""; else ""
-- ARGV[9]  the run history's retention: the most age, µs (pop)
-- ARGV[10] and the most entries of the partition (0: no history) (pop)
--
-- A taken job is marked "~" .. token in running, its score becomes the
-- deadline (the owner looks at it then: due.lua), it leaves its ready
-- ZSET, and, unless the caller owns the partition, it is pushed to the
-- owner's inbox, so that the owner arms it (the owner arms what is due
-- within its loaded window, and its poller reads the rest when the window
-- reaches it). A ready entry
-- whose job is gone, not due, or marked is stale (cancelled, moved,
-- claimed): it is removed and skipped.
--
-- Returns {head, key, token, due, record, key, token, ...}: head is one
-- byte per topic, "1" where the topic is paused (its jobs are not taken),
-- else "0", then "," and the number of stale entries removed (the caller
-- looks again at once when they kept it from taking what it asked for).
-- packed helpers: many(), cut(), decimal() and finished() are lib.lua's.
local now, max, deadline, nonce, budget, nt, tok =
  tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local pop, maxAge, maxCount = ARGV[8] == 'p', tonumber(ARGV[9]), tonumber(ARGV[10])
local stride = 8 + nt
-- Each ready ZSET is a stream read in chunks (ZRANGEBYSCORE with an
-- offset, nothing removed meanwhile), merged by (due, key), so that the
-- jobs taken are the oldest of all without reading max entries of every
-- partition (16 partitions x 100 entries sorted per call cost more than
-- the jobs taken), through a heap of the streams (a scan of 16 streams
-- per pick cost 3 ms per take of 100). The chunk: twice a partition's
-- share of max, at least 4.
local nparts = #KEYS / stride
local chunk = math.max(4, math.ceil(2 * max / nparts))
local pausedFlags = {}
local streams = {}
-- Every partition's paused HASH holds every paused topic: the first
-- partition's says it.
local paused = {}
for t = 1, nt do
  paused[t] = redis.call('HEXISTS', KEYS[4], string.match(KEYS[8 + t], 'ready:(.*)$')) == 1
end
for k = 1, #KEYS, stride do
  for t = 1, nt do
    if paused[t] then
      pausedFlags[t] = '1'
    else
      pausedFlags[t] = pausedFlags[t] or '0'
      streams[#streams + 1] = {k = k, key = KEYS[k + 7 + t], off = 0}
    end
  end
end
local function refill(s)
  local es = redis.call('ZRANGEBYSCORE', s.key, '-inf', decimal(now), 'WITHSCORES', 'LIMIT', decimal(s.off), decimal(chunk))
  s.buf, s.pos = es, 1
  s.off = s.off + #es / 2
  s.more = #es / 2 == chunk
  if #es > 0 then
    s.score, s.member = tonumber(es[2]), es[1]
    return true
  end
  return false
end
-- A binary heap of the streams by their head (score, member): a pick
-- costs a few comparisons, not one per stream. The comparisons are
-- written out, not a function: a call each cost more than the rest of a
-- pick.
-- The heap's size is kept in hn, not read with # (which does not shrink
-- on every server's Lua when the last entry is set to nil: miniredis's).
local heap, hn = {}, 0
local function down(i)
  local s = heap[i]
  local ss, sm = s.score, s.member
  while true do
    local l = 2 * i
    if l > hn then
      break
    end
    local m, ms = l, heap[l]
    if l < hn then
      local rs = heap[l + 1]
      if rs.score < ms.score or (rs.score == ms.score and rs.member < ms.member) then
        m, ms = l + 1, rs
      end
    end
    if ms.score < ss or (ms.score == ss and ms.member < sm) then
      heap[i] = ms
      i = m
    else
      break
    end
  end
  heap[i] = s
end
for _, s in ipairs(streams) do
  if refill(s) then
    hn = hn + 1
    heap[hn] = s
  end
end
for i = math.floor(hn / 2), 1, -1 do
  down(i)
end
-- The candidates, oldest first: max of them (the caller looks again
-- when stale ones kept it from max), per partition in order; in columns
-- (member, partition, ready ZSET), not a table each (the scores that
-- count are read from the pending ZSET below).
local cKey, cPart, cReady, nc = {}, {}, {}, 0
while nc < max and hn > 0 do
  local s = heap[1]
  nc = nc + 1
  cKey[nc], cPart[nc], cReady[nc] = s.member, s.k, s.key
  s.pos = s.pos + 2
  local ok = true
  if s.pos > #s.buf then
    -- Not "ok = s.more and refill(s)": miniredis's Lua (gopher-lua) gave
    -- true for it with s.more false.
    ok = false
    if s.more then
      ok = refill(s)
    end
  else
    s.score, s.member = tonumber(s.buf[s.pos + 1]), s.buf[s.pos]
  end
  if not ok then
    heap[1] = heap[hn]
    heap[hn] = nil
    hn = hn - 1
  end
  if hn > 0 then
    down(1)
  end
end
local out = {''}
local taken, used, stale = 0, 0, 0
local parts = {}
for c = 1, nc do
  local p = parts[cPart[c]]
  if not p then
    p = {keys = {}}
    parts[cPart[c]] = p
  end
  p.keys[#p.keys + 1] = cKey[c]
end
-- Per partition, the candidates' scores, records and marks in three
-- multi-key commands; then, in the merged order, the taking.
for k, p in pairs(parts) do
  local keys = p.keys
  p.scores = redis.call('ZMSCORE', KEYS[k], unpack(keys))
  p.recs = redis.call('HMGET', KEYS[k + 1], unpack(keys))
  p.marks = redis.call('HMGET', KEYS[k + 2], unpack(keys))
  p.i = 0
  p.mark, p.zadd, p.inbox, p.zrem, p.done, p.gone = {}, {}, {}, {}, {}, {}
end
for c = 1, nc do
  local p = parts[cPart[c]]
  p.i = p.i + 1
  local key, i = cKey[c], p.i
  if taken >= max or (taken > 0 and used >= budget) then
    break
  end
  local score, rec, mark = p.scores[i], p.recs[i], p.marks[i]
  local zrem = p.zrem[cReady[c]]
  if not zrem then
    zrem = {}
    p.zrem[cReady[c]] = zrem
  end
  zrem[#zrem + 1] = key
  local rv
  if rec and #rec >= 5 then
    local b1, b2, b3, b4 = string.byte(rec, 2, 5)
    rv = string.format('%08x', ((b1 * 256 + b2) * 256 + b3) * 256 + b4)
  end
  if mark and string.sub(mark, 1, 1) == '~' and string.sub(mark, 2, 9) ~= rv then
    mark = nil -- a reservation of a revision that is gone (see due.lua)
  end
  if score and rv and tonumber(score) <= now and (not mark or mark == '!') then
    taken = taken + 1
    used = used + #rec
    local token = ''
    if pop then
      p.gone[#p.gone + 1] = key
      if maxCount > 0 then
        p.done[#p.done + 1] = key
        p.done[#p.done + 1] = 'd' .. cut(rec)
      end
    else
      token = rv .. nonce .. taken
      p.mark[#p.mark + 1] = key
      p.mark[#p.mark + 1] = '~' .. token
      p.zadd[#p.zadd + 1] = deadline
      p.zadd[#p.zadd + 1] = key
      p.inbox[#p.inbox + 1] = key
    end
    out[#out + 1] = key
    out[#out + 1] = token
    out[#out + 1] = score
    out[#out + 1] = rec
  else
    stale = stale + 1
  end
end
for k, p in pairs(parts) do
  for ready, keys in pairs(p.zrem) do
    redis.call('ZREM', ready, unpack(keys))
  end
  if #p.gone > 0 then
    -- Popped: done, as resolve.lua's ack leaves a job.
    many('HDEL', KEYS[k + 2], p.gone)
    many('ZREM', KEYS[k], p.gone)
    many('HDEL', KEYS[k + 1], p.gone)
    finished(KEYS[k + 6], KEYS[k + 7], p.done, now, maxAge, maxCount)
  end
  if #p.mark > 0 then
    redis.call('HSET', KEYS[k + 2], unpack(p.mark))
    redis.call('ZADD', KEYS[k], unpack(p.zadd))
  end
  if #p.inbox > 0 and (tok == '' or redis.call('GET', KEYS[k + 4]) ~= tok) then
    redis.call('RPUSH', KEYS[k + 5], unpack(p.inbox))
  end
end
out[1] = table.concat(pausedFlags) .. ',' .. stale
return out
