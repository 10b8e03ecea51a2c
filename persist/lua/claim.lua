-- claim.lua: confirm that fired jobs of one partition are still pending,
-- and read the records the caller does not have.
--
-- KEYS[1]  pending ZSET
-- KEYS[2]  jobs HASH
-- KEYS[3]  lease STRING
-- KEYS[4]  running HASH: claim markers (job key -> lease token)
-- ARGV[1]  the caller's lease token ("" skips the fencing check)
-- ARGV[2..] groups of 2: job key, revision the caller holds ("" if none)
--
-- Returns an array with one entry per job, in order:
--   false            the job is gone (done, cancelled or dead)
--   {score, 0}       still pending at score, but a run of it is claimed
--                    already by another owner (busy): do not run it now.
--                    The caller's own mark is no obstacle: a claim whose
--                    reply was lost (Redis died) is claimed again; the
--                    caller keeps track of its own runs in progress.
--   {score, 1}       still pending at score; the caller's revision is current
--   {score, record}  still pending at score; here is the current record
-- The caller runs a job only when score is the due time it fired for;
-- otherwise the job was rescheduled and is armed again at score. A job
-- returned as pending is marked running until settle.lua (op "a", "r", "d"
-- or "u") clears the mark; Cancel reports a marked job as running.
-- Fails with "WHEELQ_FENCED" when the caller does not hold the lease, so a
-- process that lost its partition never starts one of its jobs.
if ARGV[1] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[1] then
  return redis.error_reply('WHEELQ_FENCED partition lease is held by another owner')
end
local out = {}
for i = 2, #ARGV, 2 do
  local key, rev = ARGV[i], ARGV[i + 1]
  local score = redis.call('ZSCORE', KEYS[1], key)
  local rec = score and redis.call('HGET', KEYS[2], key)
  if not rec then
    out[#out + 1] = false
  elseif (redis.call('HGET', KEYS[4], key) or ARGV[1]) ~= ARGV[1] then
    out[#out + 1] = {score, 0}
  else
    redis.call('HSET', KEYS[4], key, ARGV[1])
    if rev ~= '' and string.sub(rec, 2, 5) == rev then
      out[#out + 1] = {score, 1}
    else
      out[#out + 1] = {score, rec}
    end
  end
end
return out
