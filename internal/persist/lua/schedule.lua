-- schedule.lua: the write-ahead step of Schedule, for jobs of one partition.
--
-- KEYS[1]  pending ZSET (member job key, score due in unix µs)
-- KEYS[2]  jobs HASH (field job key, value encoded record)
-- KEYS[3]  dead ZSET
-- KEYS[4]  lease STRING (the partition owner's token)
-- KEYS[5]  loaded STRING: the owner's loaded-until time (unix µs)
-- KEYS[6]  inbox LIST: job keys the owner must arm
-- ARGV[1]  the writer's lease token, "" if it does not own the partition
-- ARGV[2..] groups of 4: mode ("r" reject or "p" replace), job key,
--          due score, record
--
-- A job due at or before the owner's loaded-until time is one the owner's
-- poller has already scanned past; unless the writer is the owner (and
-- arms it itself) its key is pushed to the inbox for the owner to arm.
--
-- A write sent again (its reply was lost and the client retried it) finds
-- its own record, byte for byte (a record carries a random revision and
-- its creation time), and answers 0 again: a replay is not a duplicate.
--
-- Returns an array with one integer per job, in order:
--   0  stored (the key was new)
--   1  replaced an existing job (mode "p"; a dead job is revived)
--  -1  rejected: the key exists (mode "r"); nothing was changed
local loaded = tonumber(redis.call('GET', KEYS[5]) or '')
local owner = ARGV[1] ~= '' and redis.call('GET', KEYS[4]) == ARGV[1]
local out = {}
for i = 2, #ARGV, 4 do
  local mode, key, score, rec = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local res, replay = -1, false
  if redis.call('HSETNX', KEYS[2], key, rec) == 1 then
    redis.call('ZADD', KEYS[1], score, key)
    res = 0
  elseif mode == 'r' and redis.call('HGET', KEYS[2], key) == rec then
    res, replay = 0, true -- applied already (inbox included): nothing to do
  elseif mode == 'p' then
    redis.call('HSET', KEYS[2], key, rec)
    redis.call('ZADD', KEYS[1], score, key)
    redis.call('ZREM', KEYS[3], key)
    res = 1
  end
  if res >= 0 and not replay and loaded and not owner and tonumber(score) <= loaded then
    redis.call('RPUSH', KEYS[6], key)
  end
  out[#out + 1] = res
end
return out
