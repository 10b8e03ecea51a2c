-- Layout D: the poller advances the owner's window from L to T over the buckets it read with
-- ZRANGEBYSCORE next -inf T (their scores are lower bounds of their jobs due after L).
-- KEYS[1] next, KEYS[2] mins, KEYS[3] loaded, KEYS[4..] h:<b>; ARGV[1] L, ARGV[2] T, ARGV[3..] bucket ids.
-- Reply: flat {key, due, ...} of the jobs due in (L, T], unordered (the wheel orders them).
local L, T = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 4, #KEYS do
  local b = ARGV[i - 1]
  local all = redis.call('HGETALL', KEYS[i])
  local nxt, lo = nil, nil
  for j = 1, #all, 2 do
    local f = all[j]
    if string.find(f, '/', 1, true) then
      local due = struct.unpack('>i8', all[j + 1])
      if not lo or due < lo then lo = due end
      if due > T then
        if not nxt or due < nxt then nxt = due end
      elseif due > L then
        out[#out + 1] = f; out[#out + 1] = string.format('%.0f', due)
      end
    end
  end
  if nxt then redis.call('ZADD', KEYS[1], nxt, b) else redis.call('ZREM', KEYS[1], b) end
  if lo then redis.call('ZADD', KEYS[2], lo, b) else redis.call('ZREM', KEYS[2], b) end
end
redis.call('SET', KEYS[3], ARGV[2])
return out
