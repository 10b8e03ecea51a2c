-- cancel.lua: delete jobs, pending or dead. One call covers one or more
-- partitions (outside Redis Cluster, a batch's partitions share a call;
-- in a cluster each has its own).
--
-- KEYS     groups of 4, one per partition:
--            pending ZSET, jobs HASH, dead ZSET,
--            running HASH (claim markers)
-- ARGV     per partition, in the order of KEYS: "" (a cancel is not
--            fenced: any process may cancel any job), n, then n job keys
--
-- Returns an array with one integer per job key, in order: 0 the job did
-- not exist, 1 it existed and is now gone, 2 it is now gone but a run of
-- it had been claimed (that run goes on; its outcome will not apply, so it
-- is not retried). Cancels apply in order, as if one by one: a key
-- repeated in a call is gone after its first cancel (0). The jobs are read
-- and deleted with multi-key commands (HMGET, HDEL, ZREM), not one call
-- per job. partitions(), column() and many() are lib.lua's, which the
-- store puts before this script.

local parts = partitions(4, 0, 1, 1)
local out = {}
for _, pt in ipairs(parts) do
  local k, first, n = pt[1], pt[3], pt[4]
  local pending, jobs, dead, running = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  if n > 0 then
    local keys = column(first, n, 1, 0)
    local recs = many('HMGET', jobs, keys)
    local runs = many('HMGET', running, keys)
    many('HDEL', jobs, keys)
    many('ZREM', pending, keys)
    many('ZREM', dead, keys)
    local seen = {}
    for j = 1, n do
      local key, r = keys[j], 0
      if recs[j] and not seen[key] then
        r = 1
        if runs[j] then
          r = 2
        end
      end
      seen[key] = true
      out[#out + 1] = r
    end
  end
end
return out
