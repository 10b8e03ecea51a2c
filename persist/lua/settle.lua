-- settle.lua: record the outcome of runs of jobs of one partition.
--
-- KEYS[1]  pending ZSET
-- KEYS[2]  jobs HASH
-- KEYS[3]  dead ZSET
-- KEYS[4]  lease STRING (the partition's owner token)
-- KEYS[5]  running HASH (claim markers, cleared by every op)
-- ARGV[1]  lease token of the caller; "" skips the fencing check
-- ARGV[2]  now, unix µs (the dead-letter score)
-- ARGV[3..] groups of 5: op, job key, revision (4 bytes), due score, record
--          op "a" ack: remove the job
--          op "r" retry: store record, move the job to due score
--          op "d" dead: store record, move the job to the dead set
--          op "u" unclaim: a claimed job was not run (shutdown)
--
-- An outcome applies only while the stored record still carries the
-- revision the run started from: a job cancelled, replaced or rescheduled
-- meanwhile is left alone. The claim marker is cleared either way.
--
-- Returns an array with one integer per outcome: 1 applied, 0 skipped.
-- Outcomes apply in order, as if one by one; the claim markers, the
-- records and the acks are handled with multi-key commands (HDEL, HMGET,
-- ZREM), since in Lua each call costs about a microsecond of its own.
-- Fails with "WHEELQ_FENCED" when ARGV[1] is not the lease's token.
if ARGV[1] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return redis.error_reply('WHEELQ_FENCED partition lease is held by another owner')
end
-- many runs cmd over key and args, at most 1000 arguments per call, and
-- returns the replies joined (a table, or the sum of integer replies).
local function many(cmd, key, args)
  if #args <= 1000 then
    return redis.call(cmd, key, unpack(args))
  end
  local res, sum = {}, 0
  for i = 1, #args, 1000 do
    local part = redis.call(cmd, key, unpack(args, i, math.min(i + 999, #args)))
    if type(part) == 'table' then
      for j = 1, #part do
        res[#res + 1] = part[j]
      end
    else
      sum = sum + part
    end
  end
  if #res > 0 then
    return res
  end
  return sum
end
local keys = {}
for i = 4, #ARGV, 5 do
  keys[#keys + 1] = ARGV[i]
end
if #keys == 0 then
  return {}
end
many('HDEL', KEYS[5], keys)
local curs = many('HMGET', KEYS[2], keys)
local acks = {}
local function flushAcks()
  if #acks > 0 then
    many('ZREM', KEYS[1], acks)
    many('HDEL', KEYS[2], acks)
    acks = {}
  end
end
local out, seen = {}, {}
for j = 1, #keys do
  local i = 3 + 5 * (j - 1)
  local op, key, rev, score, rec = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local cur = curs[j]
  if seen[key] then
    -- The same job again in this batch: read what the outcomes before
    -- it left.
    flushAcks()
    cur = redis.call('HGET', KEYS[2], key)
  end
  seen[key] = true
  if op == 'u' then
    out[j] = 1
  elseif cur and string.sub(cur, 2, 5) == rev then
    if op == 'a' then
      acks[#acks + 1] = key
    elseif op == 'r' then
      redis.call('HSET', KEYS[2], key, rec)
      redis.call('ZADD', KEYS[1], score, key)
    else
      redis.call('HSET', KEYS[2], key, rec)
      redis.call('ZREM', KEYS[1], key)
      redis.call('ZADD', KEYS[3], ARGV[2], key)
    end
    out[j] = 1
  else
    out[j] = 0
  end
end
flushAcks()
return out
