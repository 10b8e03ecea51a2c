-- reschedule.lua: move a pending job to a new due time.
--
-- KEYS[1]  pending ZSET
-- KEYS[2]  jobs HASH
-- KEYS[3]  lease STRING
-- KEYS[4]  loaded STRING
-- KEYS[5]  inbox LIST
-- KEYS[6]  running HASH (claim markers)
-- ARGV[1]  the caller's lease token, "" if it does not own the partition
-- ARGV[2]  job key
-- ARGV[3]  new due score (unix µs)
-- ARGV[4]  new revision (4 bytes), so that a run in progress cannot settle
--
-- As in schedule.lua, a job moved to or before the owner's loaded-until
-- time by someone else is pushed to the inbox.
--
-- Returns 1 when the job was pending and has moved, 2 when it has moved
-- but a run of it had been claimed (that run's outcome will not apply), 0
-- when it is not pending (unknown, done, or dead: requeue it instead).
local key = ARGV[2]
if not redis.call('ZSCORE', KEYS[1], key) then
  return 0
end
local rec = redis.call('HGET', KEYS[2], key)
if not rec then
  return 0
end
redis.call('HSET', KEYS[2], key, string.sub(rec, 1, 1) .. ARGV[4] .. string.sub(rec, 6))
redis.call('ZADD', KEYS[1], ARGV[3], key)
local loaded = tonumber(redis.call('GET', KEYS[4]) or '')
local owner = ARGV[1] ~= '' and redis.call('GET', KEYS[3]) == ARGV[1]
if loaded and not owner and tonumber(ARGV[3]) <= loaded then
  redis.call('RPUSH', KEYS[5], key)
end
if redis.call('HEXISTS', KEYS[6], key) == 1 then
  return 2
end
return 1
