-- Layouts A/B/L (a listpack ZSET z:<b> key -> due per id-bucket): the poller advances from L to T.
-- KEYS[1] next, KEYS[2] loaded, KEYS[3..] z:<b>; ARGV[1] L, ARGV[2] T, ARGV[3..] bucket ids.
-- Reply: flat {key, due, ...} of the jobs due in (L, T].
local out = {}
for i = 3, #KEYS do
  local r = redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. ARGV[1], ARGV[2], 'WITHSCORES')
  for j = 1, #r do out[#out + 1] = r[j] end
  local nx = redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. ARGV[2], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if nx[2] then redis.call('ZADD', KEYS[1], nx[2], ARGV[i]) else redis.call('ZREM', KEYS[1], ARGV[i]) end
end
redis.call('SET', KEYS[2], ARGV[2])
return out
