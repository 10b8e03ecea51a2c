-- poll.lua: the owner's periodic step for one partition: announce the new
-- loaded-until time, then hand back the inbox. The caller then scans the
-- pending set over (previous loaded-until, new loaded-until].
--
-- KEYS[1]  lease STRING
-- KEYS[2]  loaded STRING (unix µs)
-- KEYS[3]  inbox LIST
-- KEYS[4]  pending ZSET
-- KEYS[5]  running HASH (claim markers; a reset drops the old owner's)
-- ARGV[1]  the caller's lease token
-- ARGV[2]  new loaded-until time (unix µs); it never moves back
-- ARGV[3]  time to live of the loaded key, ms (it lapses with the owner)
-- ARGV[4]  "reset" on taking the partition over (the caller will scan
--          everything up to ARGV[2], so the inbox is dropped, and so are
--          the claim markers of runs of the previous owner), else ""
-- ARGV[5]  most inbox entries to return
--
-- Returns {previous loaded-until or "", key1, score1, key2, score2, ...}
-- for inbox keys still pending. Fails with "WHEELQ_FENCED" when the caller
-- does not hold the lease.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('WHEELQ_FENCED partition lease is held by another owner')
end
local prev = redis.call('GET', KEYS[2])
local new = ARGV[2] -- kept a string: Lua would print a 16-digit number as 1.7e+15
if ARGV[4] == 'reset' then
  redis.call('DEL', KEYS[3], KEYS[5])
  prev = false
elseif prev and tonumber(prev) > tonumber(new) then
  new = prev
end
redis.call('SET', KEYS[2], new, 'PX', ARGV[3])
local out = {prev or ''}
if ARGV[4] ~= 'reset' then
  local keys = redis.call('LPOP', KEYS[3], ARGV[5])
  if keys then
    for _, k in ipairs(keys) do
      local s = redis.call('ZSCORE', KEYS[4], k)
      if s then
        out[#out + 1] = k
        out[#out + 1] = s
      end
    end
  end
end
return out
