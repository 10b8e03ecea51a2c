-- take.lua: reserve up to a number of due jobs of some pulled topics
-- from the ready ZSETs of one or more partitions, oldest first (outside
-- Redis Cluster one call covers every partition; in a cluster, one). Any
-- process may call it: it is not fenced by a lease, since a reservation
-- is fenced by its own token (resolve.lua) and lapses by its deadline
-- (due.lua, run by the partition's owner).
--
-- KEYS     groups of 6 + nt, one per partition: pending ZSET, jobs HASH,
--          running HASH (marks), paused HASH, loaded STRING (the owner's
--          loaded-until time), inbox LIST, then the ready ZSET of each of
--          the nt topics, in the order of ARGV's topics
-- ARGV[1]  now, unix µs: only jobs due by then are taken
-- ARGV[2]  the most jobs to take
-- ARGV[3]  the reservations' deadline, unix µs
-- ARGV[4]  the caller's nonce: job j's token is its record's revision in
--          hex (8 characters), the nonce and j
-- ARGV[5]  a byte budget: once the records taken reach it, no more is
--          taken (the first is taken whatever its size)
-- ARGV[6]  nt
--
-- A taken job is marked "~" .. token in running, its score becomes the
-- deadline (the owner looks at it then: due.lua), it leaves its ready
-- ZSET, and it is pushed to the owner's inbox when the deadline is within
-- the owner's loaded window, so that the owner arms it. A ready entry
-- whose job is gone, not due, or marked is stale (cancelled, moved,
-- claimed): it is removed and skipped.
--
-- Returns {paused, key, token, due, record, key, token, ...}: paused has
-- one byte per topic, "1" where the topic is paused (its jobs are not
-- taken), else "0".
local now, max, deadline, nonce, budget, nt =
  tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local stride = 6 + nt
local pausedFlags = {}
local out = {''}
local taken, used = 0, 0
-- A round reads up to max entries of each ready ZSET; stale entries it
-- met are removed, and another round (of at most 4) reads on when they
-- kept it from taking max jobs.
for _ = 1, 4 do
  local cands = {}
  for k = 1, #KEYS, stride do
    for t = 1, nt do
      local topic = string.match(KEYS[k + 5 + t], 'ready:(.*)$')
      if redis.call('HEXISTS', KEYS[k + 3], topic) == 1 then
        pausedFlags[t] = '1'
      else
        pausedFlags[t] = pausedFlags[t] or '0'
        local es = redis.call('ZRANGEBYSCORE', KEYS[k + 5 + t], '-inf', now, 'WITHSCORES', 'LIMIT', 0, max - taken)
        for i = 1, #es, 2 do
          cands[#cands + 1] = {tonumber(es[i + 1]), es[i], k, k + 5 + t}
        end
      end
    end
  end
  table.sort(cands, function(a, b)
    if a[1] ~= b[1] then
      return a[1] < b[1]
    end
    return a[2] < b[2]
  end)
  local stale = 0
  for _, c in ipairs(cands) do
    if taken >= max or (taken > 0 and used >= budget) then
      break
    end
    local key, k, ready = c[2], c[3], KEYS[c[4]]
    local score = redis.call('ZSCORE', KEYS[k], key)
    local rec = score and redis.call('HGET', KEYS[k + 1], key)
    local mark = rec and redis.call('HGET', KEYS[k + 2], key)
    redis.call('ZREM', ready, key)
    if rec and #rec >= 5 and tonumber(score) <= now and (not mark or mark == '!') then
      taken = taken + 1
      used = used + #rec
      local token = string.format('%02x%02x%02x%02x', string.byte(rec, 2, 5)) .. nonce .. taken
      redis.call('HSET', KEYS[k + 2], key, '~' .. token)
      redis.call('ZADD', KEYS[k], deadline, key)
      local loaded = tonumber(redis.call('GET', KEYS[k + 4]) or '')
      if loaded and tonumber(deadline) <= loaded then
        redis.call('RPUSH', KEYS[k + 5], key)
      end
      out[#out + 1] = key
      out[#out + 1] = token
      out[#out + 1] = score
      out[#out + 1] = rec
    else
      stale = stale + 1
    end
  end
  if stale == 0 or taken >= max or (taken > 0 and used >= budget) then
    break
  end
end
out[1] = table.concat(pausedFlags)
return out
