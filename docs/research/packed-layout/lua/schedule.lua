-- Layout D: schedule (insert or replace) one job.
-- KEYS[1] h:<b> bucket HASH, KEYS[2] mins ZSET, KEYS[3] next ZSET, KEYS[4] loaded STRING
-- ARGV[1] job key, ARGV[2] due (unix µs), ARGV[3] record cut before its payload, ARGV[4] payload, ARGV[5] bucket id
-- Reply: 1 if the due is within the owner's loaded window (the caller sends it to the inbox), else 0.
-- Bucket: field job key -> due(8, BE) .. first handle(2) .. chunk count(2) .. record header;
--         field <handle> (an integer) -> a payload chunk of <= 64 bytes; field '#' -> handle counter.
local h, key, due, hdr, pay, b = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
local old = redis.call('HGET', h, key)
if old then
  local _, hd, k = struct.unpack('>i8HH', old)
  for i = 0, k - 1 do redis.call('HDEL', h, hd + i) end
end
local k = math.ceil(#pay / 64)
local hd = 0
local args = {}
if k > 0 then
  hd = redis.call('HINCRBY', h, '#', k) - k
  if hd + k > 8191 then hd = 0; redis.call('HSET', h, '#', k) end
  while redis.call('HEXISTS', h, hd) == 1 do -- after a wrap only
    hd = hd + 1
    redis.call('HSET', h, '#', hd + k)
  end
  for i = 0, k - 1 do
    args[#args + 1] = hd + i
    args[#args + 1] = string.sub(pay, i * 64 + 1, i * 64 + 64)
  end
end
redis.call('HSET', h, key, struct.pack('>i8HH', due, hd, k) .. hdr, unpack(args))
redis.call('ZADD', KEYS[2], 'LT', due, b)
local L = tonumber(redis.call('GET', KEYS[4]) or '0')
if due <= L then return 1 end
redis.call('ZADD', KEYS[3], 'LT', due, b)
return 0
