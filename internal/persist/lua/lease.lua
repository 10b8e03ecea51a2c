-- lease.lua: acquire, renew or release a partition's lease.
--
-- KEYS[1]  lease STRING (the owner's token, with a TTL)
-- ARGV[1]  "acquire", "renew" or "release"
-- ARGV[2]  the caller's token (unique per acquisition: it is the fence)
-- ARGV[3]  time to live, ms (acquire and renew)
-- ARGV[4..] (acquire) tokens of owners known to be dead: their processes
--          are gone (the caller proved it by their lock files, on its own
--          host), so their leases are taken over without waiting for them
--          to lapse
--
-- A token "instance#random" names a stable instance (Config.InstanceID):
-- acquire takes over a lease held by another token of the same instance,
-- a former incarnation of the caller that the platform guarantees is gone,
-- instead of waiting for it to lapse.
--
-- Returns 1 when the caller holds (or, for release, held) the lease, else
-- 0; for acquire, a negative number -ttl tells how long the current
-- owner's lease still runs.
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == 'release' then
  if cur == ARGV[2] then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
if cur == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
local me = string.match(ARGV[2], '^(.+#)')
local dead = false
for i = 4, #ARGV do
  if cur == ARGV[i] then
    dead = true
  end
end
if ARGV[1] == 'acquire' and (not cur or dead or (me and string.sub(cur, 1, #me) == me)) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
if ARGV[1] == 'acquire' then
  return -math.max(redis.call('PTTL', KEYS[1]), 1)
end
return 0
