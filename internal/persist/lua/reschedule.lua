-- reschedule.lua: move pending jobs to new due times. One call covers one
-- or more partitions (outside Redis Cluster, a batch's partitions share a
-- call; in a cluster each has its own).
--
-- KEYS     groups of 6, one per partition:
--            pending ZSET, jobs HASH, lease STRING, loaded STRING,
--            inbox LIST, running HASH (claim markers)
-- ARGV     per partition, in the order of KEYS: the caller's lease token
--            ("" if it does not own the partition; not a fence here: it
--            only tells whether the caller arms the jobs itself), n, then
--            n groups of 3: job key, new due score (unix µs), new revision
--            (4 bytes), so that a run in progress cannot settle
--
-- As in schedule.lua, a job moved to or before the owner's loaded-until
-- time by someone else is pushed to the inbox.
--
-- Returns an array with one integer per move, in order: 1 the job was
-- pending and has moved, 2 it has moved but a run of it had been claimed
-- (that run's outcome will not apply), 0 it is not pending (unknown, done,
-- or dead: requeue it instead). Moves apply in order, one by one.
-- partitions() is lib.lua's, which the store puts before this script.

local parts = partitions(6, 2, 1, 3, true)
local out = {}
for _, pt in ipairs(parts) do
  local k, tok, first, n = pt[1], pt[2], pt[3], pt[4]
  local pending, jobs, lease, loadedKey, inbox, running =
    KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5]
  if n > 0 then
    local loaded = tonumber(redis.call('GET', loadedKey) or '')
    local owner = tok ~= '' and redis.call('GET', lease) == tok
    for j = 1, n do
      local i = first + 3 * (j - 1)
      local key, due, rev = ARGV[i], ARGV[i + 1], ARGV[i + 2]
      local r = 0
      local rec = redis.call('ZSCORE', pending, key) and redis.call('HGET', jobs, key)
      if rec then
        redis.call('HSET', jobs, key, string.sub(rec, 1, 1) .. rev .. string.sub(rec, 6))
        redis.call('ZADD', pending, due, key)
        if loaded and not owner and tonumber(due) <= loaded then
          redis.call('RPUSH', inbox, key)
        end
        r = 1
        if claimer(redis.call('HGET', running, key)) then
          r = 2
        end
      end
      out[#out + 1] = r
    end
  end
end
return out
