-- reschedule.lua: move a pending job to a new due time.
--
-- KEYS[1]  pending ZSET
-- KEYS[2]  jobs HASH
-- ARGV[1]  job key
-- ARGV[2]  new due score (unix ms)
-- ARGV[3]  new revision (4 bytes), so that a run in progress cannot settle
--
-- Returns 1 when the job was pending and has moved, 0 when it is not
-- pending (unknown, done, or dead: requeue a dead job instead).
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], string.sub(rec, 1, 1) .. ARGV[3] .. string.sub(rec, 6))
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
