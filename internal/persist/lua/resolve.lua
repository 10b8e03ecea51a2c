-- resolve.lua: what the consumer of a reservation says of it: ack, nack
-- (retry or dead), touch, or release. One call covers one or more
-- partitions (outside Redis Cluster, a batch's partitions share a call;
-- in a cluster each has its own). Any
-- process may call it: a reservation is fenced by its token, not by the
-- partition's lease (the op applies only while the job's mark is "~" and
-- the token).
--
-- KEYS     per partition, in the order of ARGV's: pending ZSET, jobs
--          HASH, running HASH (marks), dead ZSET, history ZSET, history
--          HASH (the run history: see finished), loaded STRING, inbox
--          LIST, then the ready ZSETs its ops 'u' name
-- ARGV[1]  now, unix µs (the dead-letter score, an ack's finish time)
-- ARGV[2]  the run history's retention: the most age, µs
-- ARGV[3]  and the most entries of the partition (0: no history)
-- ARGV[4]  the channel on which a released job is announced
-- ARGV[5..] per partition: its number of KEYS, its number of ops n, then
--          7 per op: op, job key, token, the token's revision as the
--          record's 4 bytes (from its first 8 hex characters; "" if they
--          are not: it matches no record), score, record, the index among
--          its partition's KEYS (from 1) of the job's ready ZSET (op 'u';
--          else "")
--          op "a" ack: the job is done; it leaves the queue for the run
--                 history ("d")
--          op "r" retry: store record, due at score
--          op "d" dead: store record, into the dead set
--          op "t" touch: the reservation's deadline becomes score
--          op "u" release: not handed to a consumer after all; back in
--                 its topic's ready ZSET, due at score (its due time)
--
-- Returns a string of one byte per op, in order:
--   1  applied; or sent again after it applied (an ack whose job is in
--      the run history as done at the token's revision; a retry or dead
--      whose record is stored)
--   x  the reservation is not current: it lapsed, or the job was handed
--      out again, finished by another reservation, or rescheduled or
--      replaced (its revision changed)
--   c  the job was cancelled
-- packed helpers: many(), cut() and finished() are lib.lua's.
local now, maxAge, maxCount, channel = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local out = {}
local k, a = 1, 5
while a <= #ARGV do
  local nkeys, nops = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local first = a + 2
  a = first + 7 * nops
  local pending, jobs, running, dead, hidx, hist, loadedKey, inbox =
    KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], KEYS[k + 6], KEYS[k + 7]
  local done = {}
  local acked = {} -- job key -> the token this call acked it with
  local loaded
  -- The ops' marks and records in two multi-key reads; the acks' deletes
  -- in three multi-key commands (flushed before a job named again is read
  -- again), as settle.lua does: most calls are batches of acks.
  local keys = {}
  for i = first, a - 1, 7 do
    keys[#keys + 1] = ARGV[i + 1]
  end
  local marks, curs = {}, {}
  if #keys > 0 then
    marks = many('HMGET', running, keys)
    curs = many('HMGET', jobs, keys)
  end
  local acks = {}
  local function flushAcks()
    if #acks > 0 then
      many('HDEL', running, acks)
      many('ZREM', pending, acks)
      many('HDEL', jobs, acks)
      acks = {}
    end
  end
  local seen = {}
  local j = 0
  for i = first, a - 1, 7 do
    j = j + 1
    local op, key, token, rev, score, rec, ready =
      ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
    local mark, cur = marks[j], curs[j]
    if seen[key] then
      -- Named again in this call: read what the ops before it left.
      flushAcks()
      mark = redis.call('HGET', running, key)
      cur = redis.call('HGET', jobs, key)
    end
    seen[key] = true
    local r = 'x'
    -- The token's revision must still be the record's: a job rescheduled
    -- or replaced while reserved runs again, and its old reservation's
    -- outcome does not apply (due.lua and take.lua ignore the old mark).
    if cur and mark == '~' .. token and #rev == 4 and string.sub(cur, 2, 5) == rev then
      r = '1'
      if op == 'a' then
        acks[#acks + 1] = key
        acked[key] = token
        if maxCount > 0 then
          done[#done + 1] = key
          done[#done + 1] = 'd' .. cut(cur)
        end
      elseif op == 'r' then
        redis.call('HDEL', running, key)
        redis.call('HSET', jobs, key, rec)
        redis.call('ZADD', pending, score, key)
        if loaded == nil then
          loaded = tonumber(redis.call('GET', loadedKey) or '') or false
        end
        if loaded and tonumber(score) <= loaded then
          redis.call('RPUSH', inbox, key)
        end
      elseif op == 'd' then
        redis.call('HDEL', running, key)
        redis.call('HSET', jobs, key, rec)
        redis.call('ZREM', pending, key)
        redis.call('ZADD', dead, ARGV[1], key)
      elseif op == 't' then
        -- A touch moves the deadline later, never earlier.
        local s = redis.call('ZSCORE', pending, key)
        if s and tonumber(s) >= tonumber(score) then
          r = 'k'
        else
          redis.call('ZADD', pending, score, key)
        end
      elseif op == 'u' then
        redis.call('HDEL', running, key)
        redis.call('ZADD', pending, score, key)
        redis.call('ZADD', KEYS[k - 1 + tonumber(ready)], score, key)
        redis.call('PUBLISH', channel, 'ready ' .. string.match(key, '^[^/]*'))
      end
    elseif cur and (op == 'r' or op == 'd') and cur == rec then
      r = '1' -- sent again: this very outcome is stored already
    elseif not cur and op == 'a' and acked[key] == token then
      r = '1' -- sent again within this call
    elseif not cur then
      local h = redis.call('HGET', hist, key)
      local o = h and string.sub(h, 1, 1)
      if o == 'c' or o == 'C' then
        r = 'c'
      elseif op == 'a' and o == 'd' and #rev == 4 and string.sub(h, 3, 6) == rev then
        r = '1' -- sent again: acked already
      end
    end
    out[#out + 1] = r
  end
  flushAcks()
  finished(hidx, hist, done, now, maxAge, maxCount)
  k = k + nkeys
end
return table.concat(out)
