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
--
-- The jobs are read and marked with a few multi-key commands (ZMSCORE,
-- HMGET, HSET; Redis >= 6.2) rather than three commands each: in Lua each
-- call costs about a microsecond of its own, more than the lookups.
if ARGV[1] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[1] then
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
for i = 2, #ARGV, 2 do
  keys[#keys + 1] = ARGV[i]
end
if #keys == 0 then
  return {}
end
local scores = many('ZMSCORE', KEYS[1], keys)
local recs = many('HMGET', KEYS[2], keys)
local marks = many('HMGET', KEYS[4], keys)
local out, mark = {}, {}
for j = 1, #keys do
  local score, rec, rev = scores[j], recs[j], ARGV[2 * j + 1]
  if not score or not rec then
    out[j] = false
  elseif (marks[j] or ARGV[1]) ~= ARGV[1] then
    out[j] = {score, 0}
  else
    mark[#mark + 1] = keys[j]
    mark[#mark + 1] = ARGV[1]
    if rev ~= '' and string.sub(rec, 2, 5) == rev then
      out[j] = {score, 1}
    else
      out[j] = {score, rec}
    end
  end
end
if #mark > 0 then
  many('HSET', KEYS[4], mark)
end
return out
