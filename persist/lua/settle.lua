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
-- Fails with "WHEELQ_FENCED" when ARGV[1] is not the lease's token.
if ARGV[1] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return redis.error_reply('WHEELQ_FENCED partition lease is held by another owner')
end
local out = {}
for i = 3, #ARGV, 5 do
  local op, key, rev, score, rec = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  redis.call('HDEL', KEYS[5], key)
  local cur = redis.call('HGET', KEYS[2], key)
  if op == 'u' then
    out[#out + 1] = 1
  elseif cur and string.sub(cur, 2, 5) == rev then
    if op == 'a' then
      redis.call('ZREM', KEYS[1], key)
      redis.call('HDEL', KEYS[2], key)
    elseif op == 'r' then
      redis.call('HSET', KEYS[2], key, rec)
      redis.call('ZADD', KEYS[1], score, key)
    else
      redis.call('HSET', KEYS[2], key, rec)
      redis.call('ZREM', KEYS[1], key)
      redis.call('ZADD', KEYS[3], ARGV[2], key)
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
