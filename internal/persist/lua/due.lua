-- due.lua: the owner's step for jobs of pulled topics whose time has
-- come (a job's due time, or the deadline of its reservation). One call
-- covers one partition.
--
-- KEYS     pending ZSET, jobs HASH, lease STRING, running HASH (claim
--          and reservation marks), paused HASH, then the ready ZSET of
--          every topic of the call's jobs (ready:<topic>: job key -> due)
-- ARGV[1]  the caller's lease token (a fence: another token fails the
--          call, changing nothing)
-- ARGV[2]  now, unix µs, by the caller's wall clock: no job whose score
--          is later is handed out
-- ARGV[3]  the channel on which a job queued to a ready set is announced
--          ("ready <topic>", once per topic per call)
-- ARGV[4]  ahead, unix µs (>= now): a job with a reservation token is
--          reserved when its score is at or before it (ahead of its time:
--          the caller hands it over at its time)
-- ARGV[5..] 4 per job: job key, the index in KEYS of its topic's ready
--          ZSET, a reservation token ("" to queue the job for any
--          consumer), the reservation's deadline (unix µs; "" when no
--          token)
--
-- Returns {statuses, scores, records...}: statuses one byte per job, in
-- order; scores the jobs' scores, "," after each (where a status needs
-- one); the records of the jobs whose status is 'r' or 'l', in order.
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
--   x   its record is too short to hold a revision (corrupt): it follows,
--       for the caller to dead-letter
--   l   its reservation lapsed (the score, the deadline, has come and
--       the mark is still a reservation's): now marked as the caller's
--       claim, so that no consumer's ack applies; its record follows, and
--       the caller stores the failed attempt (settle.lua)
local tok, now, channel, ahead = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
if redis.call('GET', KEYS[3]) ~= tok then
  return redis.error_reply('WHEELQ_FENCED partition lease is held by another owner')
end
local paused = {}
if redis.call('HLEN', KEYS[5]) > 0 then
  for _, t in ipairs(redis.call('HKEYS', KEYS[5])) do
    paused[t] = true
  end
end
local st, sc, out = {}, {}, {'', ''}
local announce = {}
for i = 5, #ARGV, 4 do
  local key, ready, res, deadline = ARGV[i], KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2], ARGV[i + 3]
  local score = redis.call('ZSCORE', KEYS[1], key)
  local rec = score and redis.call('HGET', KEYS[2], key)
  local mark = rec and redis.call('HGET', KEYS[4], key)
  local topic = string.match(key, '^[^/]*')
  if not rec then
    st[#st + 1], sc[#sc + 1] = 'g', ''
  elseif #rec < 5 then
    st[#st + 1], sc[#sc + 1] = 'x', score
    out[#out + 1] = rec
  elseif tonumber(score) > ahead or (tonumber(score) > now and (res == '' or (mark and mark ~= '!'))) then
    st[#st + 1], sc[#sc + 1] = 'm', score
  elseif mark and string.sub(mark, 1, 1) == '~' then
    redis.call('HSET', KEYS[4], key, tok)
    st[#st + 1], sc[#sc + 1] = 'l', score
    out[#out + 1] = rec
  elseif paused[topic] then
    st[#st + 1], sc[#sc + 1] = 'p', score
  elseif mark and mark ~= '!' then
    st[#st + 1], sc[#sc + 1] = 'b', score
  elseif res ~= '' then
    redis.call('HSET', KEYS[4], key, '~' .. string.format('%02x%02x%02x%02x', string.byte(rec, 2, 5)) .. res)
    redis.call('ZADD', KEYS[1], deadline, key)
    redis.call('ZREM', ready, key)
    st[#st + 1], sc[#sc + 1] = 'r', score
    out[#out + 1] = rec
  else
    redis.call('ZADD', ready, score, key)
    announce[topic] = true
    st[#st + 1], sc[#sc + 1] = 'q', score
  end
end
for topic in pairs(announce) do
  redis.call('PUBLISH', channel, 'ready ' .. topic)
end
sc[#sc + 1] = ''
out[1], out[2] = table.concat(st), table.concat(sc, ',')
return out
