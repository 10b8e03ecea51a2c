-- schedule.lua: the write-ahead step of Schedule, for jobs of one partition.
--
-- KEYS[1]  pending ZSET (member job key, score due in unix ms)
-- KEYS[2]  jobs HASH (field job key, value encoded record)
-- KEYS[3]  dead ZSET
-- ARGV     groups of 4: mode ("r" reject or "p" replace), job key,
--          due score, record
--
-- Returns an array with one integer per job, in order:
--   0  stored (the key was new)
--   1  replaced an existing job (mode "p"; a dead job is revived)
--  -1  rejected: the key exists (mode "r"); nothing was changed
local out = {}
for i = 1, #ARGV, 4 do
  local mode, key, score, rec = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if redis.call('HSETNX', KEYS[2], key, rec) == 1 then
    redis.call('ZADD', KEYS[1], score, key)
    out[#out + 1] = 0
  elseif mode == 'p' then
    redis.call('HSET', KEYS[2], key, rec)
    redis.call('ZADD', KEYS[1], score, key)
    redis.call('ZREM', KEYS[3], key)
    out[#out + 1] = 1
  else
    out[#out + 1] = -1
  end
end
return out
