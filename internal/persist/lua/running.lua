-- running.lua: the jobs of a partition with a claim mark (a run claimed,
-- its outcome not stored yet), with their due times. The running HASH
-- holds only the runs in flight, so it is small.
--
-- KEYS[1]  running HASH (job key -> token of the claiming owner)
-- KEYS[2]  pending ZSET
--
-- Returns a flat array: job key, score, ... for every marked job that is
-- still pending (a mark without a pending entry is stale: left out).
-- A mark "!" alone (a run interrupted, none claimed now) is not a run in
-- flight: left out.
local all, keys = redis.call('HGETALL', KEYS[1]), {}
for i = 1, #all, 2 do
  if all[i + 1] ~= '!' then
    keys[#keys + 1] = all[i]
  end
end
local out = {}
for i = 1, #keys, 500 do
  local part = {}
  for j = i, math.min(i + 499, #keys) do
    part[#part + 1] = keys[j]
  end
  local scores = redis.call('ZMSCORE', KEYS[2], unpack(part))
  for j = 1, #part do
    if scores[j] then
      out[#out + 1] = part[j]
      out[#out + 1] = scores[j]
    end
  end
end
return out
