-- claim.lua: confirm that fired jobs of one partition are still pending,
-- and read the records the caller does not have.
--
-- KEYS[1]  pending ZSET
-- KEYS[2]  jobs HASH
-- ARGV     groups of 2: job key, revision the caller holds ("" if none)
--
-- Returns an array with one entry per job, in order:
--   false            the job is gone (done, cancelled or dead)
--   {score, 1}       still pending at score; the caller's revision is current
--   {score, record}  still pending at score; here is the current record
-- The caller runs a job only when score is the due time it fired for;
-- otherwise the job was rescheduled and is armed again at score.
local out = {}
for i = 1, #ARGV, 2 do
  local key, rev = ARGV[i], ARGV[i + 1]
  local score = redis.call('ZSCORE', KEYS[1], key)
  local rec = score and redis.call('HGET', KEYS[2], key)
  if not rec then
    out[#out + 1] = false
  elseif rev ~= '' and string.sub(rec, 2, 5) == rev then
    out[#out + 1] = {score, 1}
  else
    out[#out + 1] = {score, rec}
  end
end
return out
