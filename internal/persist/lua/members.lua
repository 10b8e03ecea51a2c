-- members.lua: the namespace's roster of live worker processes, for the
-- balanced assignment of partitions (see persist.Store.Members).
--
-- KEYS[1]  members ZSET: member id -> expiry (unix ms by Redis's clock)
-- KEYS[2]  version STRING: a counter that changes whenever the roster does
-- ARGV[1]  "beat" (join or stay), "leave", or "peek"
-- ARGV[2]  the caller's member id (beat, leave)
-- ARGV[3]  time to live of the caller's entry, ms (beat)
--
-- Every call first drops the members whose entry has expired. The version
-- is incremented when a member joins, leaves or expires, and published on
-- the channel named KEYS[1], so a process can watch it cheaply (peek, or
-- a subscription) and read the whole roster only when it changed.
--
-- Returns {version} for peek, {version, 1 if the member was there else 0}
-- for leave, {version, id1, id2, ...} (live
-- members, sorted) for beat.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local changed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) > 0
local left = 0
if ARGV[1] == 'beat' then
  if redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2]) == 1 then
    changed = true
  end
elseif ARGV[1] == 'leave' then
  if redis.call('ZREM', KEYS[1], ARGV[2]) == 1 then
    changed = true
    left = 1
  end
end
local v
if changed then
  v = redis.call('INCR', KEYS[2])
  -- Wake the members now rather than at their next poll (WatchRoster);
  -- the channel is named after the roster's key.
  redis.call('PUBLISH', KEYS[1], v)
else
  v = tonumber(redis.call('GET', KEYS[2]) or '0')
end
if ARGV[1] == 'leave' then
  return {v, left}
elseif ARGV[1] ~= 'beat' then
  return {v}
end
local out = {v}
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  out[#out + 1] = m
end
return out
