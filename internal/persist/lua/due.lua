-- due.lua: the owner's step for jobs of pulled topics whose time has
-- come (a job's due time, or the deadline of its reservation). One call
-- covers one or more partitions (outside Redis Cluster, a batch's
-- partitions share a call; in a cluster each has its own).
--
-- KEYS     per partition, in the order of ARGV's: pending ZSET, jobs
--          HASH, lease STRING, running HASH (claim and reservation
--          marks), paused HASH, then the ready ZSET of every topic of its
--          jobs (ready:<topic>: job key -> due)
-- ARGV[1]  now, unix µs, by the caller's wall clock: no job whose score
--          is later is handed out
-- ARGV[2]  the channel on which a job queued to a ready set is announced
--          ("ready <topic>", once per topic per call)
-- ARGV[3]  ahead, unix µs (>= now): a job with a reservation token is
--          reserved when its score is at or before it (ahead of its time:
--          the caller hands it over at its time)
-- ARGV[4..] per partition: the caller's lease token (a fence: the jobs of
--          a partition whose lease holds another token are answered 'F',
--          nothing changed there; an answer, not an error, so that the
--          other partitions' jobs stand), its number of KEYS, its number
--          of jobs n, then 4 per job: job key, the index among its
--          partition's KEYS (from 1) of its topic's ready ZSET, a
--          reservation token ("" to queue the job for any consumer), the
--          reservation's deadline (unix µs; "" when no token)
--
-- Returns {statuses, scores, records...}: statuses one byte per job, in
-- order; scores the jobs' scores, "," after each (where a status needs
-- one); the records of the jobs whose status is 'r' or 'l', in order.
--   F   fenced: the caller does not hold the partition's lease
--   g   gone (done, cancelled, dead) or its record is missing
--   m   not due by now (rescheduled, or a reservation touched; or, with
--       a token, not by ahead): its score is the new time to look again
--   p   its topic is paused: left as it is
--   b   a run of it is claimed (a handler's mark, not a reservation)
--   q   queued: in its topic's ready ZSET at its due time, for any
--       consumer of any process (announced on the channel)
--   r   reserved: marked "~" and the reservation's token, its score is
--       the deadline; its record follows. The token is the record's
--       revision in hex (8 characters) and the caller's nonce, so that an
--       ack sent again after the job is gone is told by the run history
--       (resolve.lua)
--   R   reserved again: the job's mark is the reservation of this very
--       token (made by a call whose reply the caller did not get), still
--       current; its deadline is now the one given, its record follows,
--       and its score is the deadline it had (the job's due time is not
--       known here: the caller hands it over no earlier than the ahead of
--       the call that made it)
--   x   its record is too short to hold a revision (corrupt): it follows,
--       for the caller to dead-letter
--   l   its reservation lapsed (the score, the deadline, has come and
--       the mark is still a reservation's): now marked as the caller's
--       claim, so that no consumer's ack applies; its record follows, and
--       the caller stores the failed attempt (settle.lua)
local now, channel, ahead = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local st, sc, out = {}, {}, {'', ''}
local announce = {}
local k, a = 1, 4
while a <= #ARGV do
  local tok, nkeys, n = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local first = a + 3
  a = first + 4 * n
  if redis.call('GET', KEYS[k + 2]) ~= tok then
    for _ = 1, n do
      st[#st + 1], sc[#sc + 1] = 'F', ''
    end
  else
    local pending, jobs, running = KEYS[k], KEYS[k + 1], KEYS[k + 3]
    local paused = {}
    if redis.call('HLEN', KEYS[k + 4]) > 0 then
      for _, t in ipairs(redis.call('HKEYS', KEYS[k + 4])) do
        paused[t] = true
      end
    end
    for i = first, a - 1, 4 do
      local key, ready, res, deadline = ARGV[i], KEYS[k - 1 + tonumber(ARGV[i + 1])], ARGV[i + 2], ARGV[i + 3]
      local score = redis.call('ZSCORE', pending, key)
      local rec = score and redis.call('HGET', jobs, key)
      local mark = rec and redis.call('HGET', running, key)
      local topic = string.match(key, '^[^/]*')
      local rv = rec and #rec >= 5 and string.format('%02x%02x%02x%02x', string.byte(rec, 2, 5))
      if mark and string.sub(mark, 1, 1) == '~' and string.sub(mark, 2, 9) ~= rv then
        -- A reservation of a revision that is gone (rescheduled or
        -- replaced meanwhile): its outcome will not apply; the job is
        -- handed out anew.
        mark = nil
      end
      if not rec then
        st[#st + 1], sc[#sc + 1] = 'g', ''
      elseif #rec < 5 then
        st[#st + 1], sc[#sc + 1] = 'x', score
        out[#out + 1] = rec
      elseif res ~= '' and mark == '~' .. rv .. res and tonumber(score) > now then
        -- This caller's own reservation, by a call whose reply it did not
        -- get (the same nonce, sent again): still current, so made again,
        -- its deadline renewed; the score was its deadline, not the job's
        -- due time (see 'R').
        redis.call('ZADD', pending, deadline, key)
        st[#st + 1], sc[#sc + 1] = 'R', score
        out[#out + 1] = rec
      elseif tonumber(score) > ahead or (tonumber(score) > now and (res == '' or (mark and mark ~= '!'))) then
        st[#st + 1], sc[#sc + 1] = 'm', score
      elseif mark and string.sub(mark, 1, 1) == '~' then
        redis.call('HSET', running, key, tok)
        st[#st + 1], sc[#sc + 1] = 'l', score
        out[#out + 1] = rec
      elseif paused[topic] then
        st[#st + 1], sc[#sc + 1] = 'p', score
      elseif mark and mark ~= '!' then
        st[#st + 1], sc[#sc + 1] = 'b', score
      elseif res ~= '' then
        redis.call('HSET', running, key, '~' .. rv .. res)
        redis.call('ZADD', pending, deadline, key)
        redis.call('ZREM', ready, key)
        st[#st + 1], sc[#sc + 1] = 'r', score
        out[#out + 1] = rec
      else
        -- Queued already (a reload or a sweep armed it again): no new
        -- announcement, which would send every consumer to look.
        if redis.call('ZSCORE', ready, key) ~= score then
          redis.call('ZADD', ready, score, key)
          announce[topic] = true
        end
        st[#st + 1], sc[#sc + 1] = 'q', score
      end
    end
  end
  k = k + nkeys
end
for topic in pairs(announce) do
  redis.call('PUBLISH', channel, 'ready ' .. topic)
end
sc[#sc + 1] = ''
out[1], out[2] = table.concat(st), table.concat(sc, ',')
return out
