-- repair.lua: find and fix inconsistent state in one partition, a bounded
-- step at a time. No path of wheelq writes such state today (writes,
-- settles and cancels are atomic), but a foreign tool, an older version or
-- a write cut short may leave it, and a job must not be stuck or hidden:
--   - a pending entry without a record can never run (a claim finds it
--     gone) and was re-armed by every sweep: it is removed;
--   - a record in neither the pending nor the dead set will never run and
--     no listing shows it: it is moved to the dead set (score ARGV[6]),
--     where DeadJobs shows it and Requeue or Cancel handles it;
--   - a claim mark of a job without a record is stale: it is cleared; a
--     mark whose token is not the lease holder's is a run interrupted: it
--     becomes "!" (a take-over does that too; this catches what is left
--     between take-overs), so that the job's next run is a rerun.
--
-- KEYS[1]  pending ZSET
-- KEYS[2]  jobs HASH
-- KEYS[3]  dead ZSET
-- KEYS[4]  lease STRING
-- KEYS[5]  running HASH
-- ARGV[1]  the caller's lease token (fenced: only the owner repairs)
-- ARGV[2]  ZSCAN cursor of pending ("0" to start)
-- ARGV[3]  HSCAN cursor of jobs
-- ARGV[4]  HSCAN cursor of running
-- ARGV[5]  COUNT for each scan (the step's bound)
-- ARGV[6]  now, unix µs (the dead-letter score)
--
-- Returns {pending cursor, jobs cursor, running cursor, removed pending
-- entries, records dead-lettered, marks cleared, then the keys fixed}.
-- A cursor "0" means that walk is done (Redis's SCAN contract: an element
-- there throughout a walk is seen at least once).
if redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return redis.error_reply('WHEELQ_FENCED partition lease is held by another owner')
end
local n = tonumber(ARGV[5])
local maxBytes = 1048576 -- of records read by one step
local out = {ARGV[2], ARGV[3], ARGV[4], 0, 0, 0}

if ARGV[2] ~= 'done' then
  local r = redis.call('ZSCAN', KEYS[1], ARGV[2], 'COUNT', n)
  out[1] = r[1]
  for i = 1, #r[2], 2 do
    local key = r[2][i]
    if redis.call('HEXISTS', KEYS[2], key) == 0 then
      redis.call('ZREM', KEYS[1], key)
      out[4] = out[4] + 1
      out[#out + 1] = key
    end
  end
end
if ARGV[3] ~= 'done' then
  -- HSCAN returns the records too (NOVALUES is Redis 7.4's): a step of
  -- n records of 1 MiB copied 200 MiB into Lua, 3 s of Redis's time. The
  -- walk goes in small scans and stops after n records or about maxBytes
  -- of them, whichever comes first.
  -- Each scan's COUNT follows the mean size of the records seen so far
  -- (the first: 4).
  local cursor, seen, bytes = ARGV[3], 0, 0
  repeat
    local count = 4
    if seen > 0 then
      count = math.floor((maxBytes - bytes) / math.max(bytes / seen, 1)) + 1
    end
    count = math.max(1, math.min(count, n - seen, 64))
    local r = redis.call('HSCAN', KEYS[2], cursor, 'COUNT', count)
    cursor = r[1]
    for i = 1, #r[2], 2 do
      local key = r[2][i]
      seen, bytes = seen + 1, bytes + #r[2][i + 1]
      if not redis.call('ZSCORE', KEYS[1], key) and not redis.call('ZSCORE', KEYS[3], key) then
        redis.call('ZADD', KEYS[3], ARGV[6], key)
        out[5] = out[5] + 1
        out[#out + 1] = key
      end
    end
  until cursor == '0' or seen >= n or bytes >= maxBytes
  out[2] = cursor
end
if ARGV[4] ~= 'done' then
  local r = redis.call('HSCAN', KEYS[5], ARGV[4], 'COUNT', n)
  out[3] = r[1]
  for i = 1, #r[2], 2 do
    local key, mark = r[2][i], r[2][i + 1]
    local tok = mark
    if string.sub(tok, 1, 2) == '!=' then
      tok = string.sub(tok, 3)
    end
    if redis.call('HEXISTS', KEYS[2], key) == 0 then
      redis.call('HDEL', KEYS[5], key)
      out[6] = out[6] + 1
      out[#out + 1] = key
    elseif mark ~= '!' and tok ~= ARGV[1] and string.sub(mark, 1, 1) ~= '~' then
      redis.call('HSET', KEYS[5], key, '!')
      out[6] = out[6] + 1
      out[#out + 1] = key
    end
  end
end
return out
