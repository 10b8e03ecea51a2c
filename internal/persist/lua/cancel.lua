-- cancel.lua: delete jobs, pending or dead. One call covers one or more
-- partitions (outside Redis Cluster, a batch's partitions share a call;
-- in a cluster each has its own).
--
-- KEYS     groups of 8, one per partition:
--            pending ZSET, jobs HASH, dead ZSET,
--            running HASH (claim markers),
--            two cancelled HASHes (recent calls: token -> results),
--            history ZSET, history HASH (the run history: see finished)
-- ARGV[1]  the call's token (random, new for every call)
-- ARGV[2]  the run history's retention: the most age, µs
-- ARGV[3]  and the most entries of the partition (0: no history)
-- ARGV[4..] per partition, in the order of KEYS: "" (a cancel is not
--            fenced: any process may cancel any job), n, then n job keys
--
-- Returns an array with one integer per job key, in order: 0 the job did
-- not exist, 1 it existed and is now gone, 2 it is now gone but a run of
-- it had been claimed (that run goes on; its outcome will not apply, so it
-- is not retried). Cancels apply in order, as if one by one: a key
-- repeated in a call is gone after its first cancel (0). The jobs are read
-- and deleted with multi-key commands (HMGET, HDEL, ZREM), not one call
-- per job. A job cancelled is left in the run history as cancelled ("c",
-- or "C" when a run of it had been claimed, and its record without the
-- payload). partitions(), column(), many(), cut() and finished() are
-- lib.lua's, which the store puts before this script.
--
-- The claim marks of the deleted jobs are cleared (a mark whose run never
-- came would otherwise stay until the next take-over). Every call leaves
-- its results under its token in its first partition's cancelled HASH of
-- the current minute (by Redis's clock; the two HASHes take turns, each
-- emptied when its minute comes round again and expiring two minutes after
-- its last write): the same call sent again (its reply was lost and the
-- client retried) finds them and answers as the first time, not 0. One
-- entry per call, not per job or partition: a few commands per call.

local tok = ARGV[1]
local maxAge, maxCount = tonumber(ARGV[2]), tonumber(ARGV[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local minute = math.floor(tonumber(time[1]) / 60)
local turn = minute % 2 -- which cancelled HASH this minute writes
local parts = partitions(8, 0, 4, 1)
if #parts == 0 then
  return {}
end
-- The call's results live with its first partition's keys (a call is
-- what a client sends again; outside a cluster it spans partitions).
local k0 = parts[1][1]
local done = KEYS[k0 + 4 + turn]
local total = 0
for _, pt in ipairs(parts) do
  total = total + pt[4]
end
local before = redis.call('HGET', done, tok) or redis.call('HGET', KEYS[k0 + 5 - turn], tok)
if before and #before == total then
  -- A replay of this very call: answer as the first time.
  local out = {}
  for j = 1, total do
    out[j] = tonumber(string.sub(before, j, j))
  end
  return out
end

local out = {}
for _, pt in ipairs(parts) do
  local k, first, n = pt[1], pt[3], pt[4]
  local pending, jobs, dead, running = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  if n > 0 then
    local keys = column(first, n, 1, 0)
    local recs = many('HMGET', jobs, keys)
    local runs = many('HMGET', running, keys)
    many('HDEL', jobs, keys)
    many('ZREM', pending, keys)
    many('ZREM', dead, keys)
    many('HDEL', running, keys)
    local seen, gone = {}, {}
    for j = 1, n do
      local key, r = keys[j], 0
      if recs[j] and not seen[key] then
        r = 1
        local mark = 'c'
        if claimer(runs[j]) then
          r, mark = 2, 'C'
        end
        if maxCount > 0 then
          gone[#gone + 1] = key
          gone[#gone + 1] = mark .. cut(recs[j])
        end
      end
      seen[key] = true
      out[#out + 1] = r
    end
    finished(KEYS[k + 6], KEYS[k + 7], gone, now, maxAge, maxCount)
  end
end
if redis.call('HGET', done, '') ~= tostring(minute) then
  redis.call('DEL', done) -- last written two minutes ago or more
  redis.call('HSET', done, '', minute)
end
redis.call('HSET', done, tok, table.concat(out))
redis.call('PEXPIRE', done, 120000)
return out
