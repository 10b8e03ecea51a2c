-- settle.lua: record the outcome of runs of jobs. One call covers one or
-- more partitions (outside Redis Cluster, a batch's partitions share a
-- call; in a cluster each has its own).
--
-- KEYS     groups of 7, one per partition:
--            pending ZSET, jobs HASH, dead ZSET,
--            lease STRING (the partition's owner token),
--            running HASH (claim markers, cleared by every op),
--            history ZSET, history HASH (the run history: see finished)
-- ARGV[1]  now, unix µs (the dead-letter score, an ack's finish time)
-- ARGV[2]  the run history's retention: the most age, µs
-- ARGV[3]  and the most entries of the partition (0: no history)
-- ARGV[4..] per partition, in the order of KEYS:
--            the caller's lease token ("" skips the fencing check),
--            its ops, one byte per outcome (n of them), then its outcomes
--            packed into one string (see unpacked), 4 fields each: job
--            key, revision (4 bytes), due score (decimal), record. Two
--            strings, not 5 arguments per outcome: the client boxes and
--            Redis parses a few values, not thousands. A large record is
--            not copied into the string: it follows the partitions as an
--            argument of its own, in the order of the outcomes.
--          op "a" ack: remove the job
--          op "r" retry: store record, move the job to due score
--          op "d" dead: store record, move the job to the dead set
--          op "u" unclaim: a claimed job was not run (shutdown)
--
-- An outcome applies only while the stored record still carries the
-- revision the run started from: a job cancelled, replaced or rescheduled
-- meanwhile is left alone. The claim marker is cleared either way. A
-- retry or dead-letter sent again (its reply was lost, or late past the
-- caller's timeout) finds its own new record stored and answers 1 again,
-- so that the caller arms the retry: a replay is told from a skip.
--
-- Returns a string of one byte per outcome, in order: "1" applied, "0"
-- skipped (one value for the client to read, not one per outcome).
-- Outcomes apply in order, as if one by one; the claim
-- markers, the records and the acks are handled with multi-key commands
-- (HDEL, HMGET, ZREM), not one call per job. Fails with "WHEELQ_FENCED",
-- changing nothing, when a token is not its partition's lease's. An ack
-- that applies leaves the job in the run history as done ("d" and its
-- record without the payload). packed(), unpacked(), many(), cut() and
-- finished() are lib.lua's, which the store puts before this script.

local now, maxAge, maxCount = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local parts, fenced, extra = packed(7, 3, 4, 2)
if fenced then
  return fenced
end

-- Every partition's outcomes are decoded first, so that a malformed call
-- changes nothing.
for _, pt in ipairs(parts) do
  local cols, n
  cols, n, extra = unpacked(ARGV[pt[3] + 1], 4, extra)
  if n ~= #ARGV[pt[3]] then
    return redis.error_reply('ERR settle: ' .. #ARGV[pt[3]] .. ' ops for ' .. n .. ' outcomes')
  end
  pt[4], pt[5] = cols, n
end

local out = {}
for _, pt in ipairs(parts) do
  local k, ops, cols, n = pt[1], ARGV[pt[3]], pt[4], pt[5]
  local keys, revs, scores, recs = cols[1], cols[2], cols[3], cols[4]
  local pending, jobs, dead, running = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 4]
  if n > 0 then
    -- The marks matter only to an unclaim (a rerun's "!" stays): read
    -- them only for a batch that has one (acks are the common case).
    local marks = {}
    if string.find(ops, 'u', 1, true) then
      marks = many('HMGET', running, keys)
    end
    many('HDEL', running, keys)
    local curs = many('HMGET', jobs, keys)
    local acks = {}
    local function flushAcks()
      if #acks > 0 then
        many('ZREM', pending, acks)
        many('HDEL', jobs, acks)
        acks = {}
      end
    end
    local seen, done = {}, {}
    for j = 1, n do
      local op, key, rev, score, rec = string.sub(ops, j, j), keys[j], revs[j], scores[j], recs[j]
      local cur = curs[j]
      if seen[key] then
        -- The same job again in this batch: read what the outcomes before
        -- it left.
        flushAcks()
        cur = redis.call('HGET', jobs, key)
      end
      seen[key] = true
      if op == 'u' then
        if marks[j] and string.sub(marks[j], 1, 1) == '!' then
          -- Not run: its next run is still a rerun.
          redis.call('HSET', running, key, '!')
        end
        out[#out + 1] = '1'
      elseif cur and string.sub(cur, 2, 5) == rev then
        if op == 'a' then
          acks[#acks + 1] = key
          if maxCount > 0 then
            done[#done + 1] = key
            done[#done + 1] = 'd' .. cut(cur)
          end
        elseif op == 'r' then
          redis.call('HSET', jobs, key, rec)
          redis.call('ZADD', pending, score, key)
        else
          redis.call('HSET', jobs, key, rec)
          redis.call('ZREM', pending, key)
          redis.call('ZADD', dead, ARGV[1], key)
        end
        out[#out + 1] = '1'
      elseif cur and op ~= 'a' and cur == rec then
        out[#out + 1] = '1' -- a replay: this very outcome is stored already
      else
        out[#out + 1] = '0'
      end
    end
    flushAcks()
    finished(KEYS[k + 5], KEYS[k + 6], done, now, maxAge, maxCount)
  end
end
return table.concat(out)
