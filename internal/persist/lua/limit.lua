-- limit.lua: per-topic limits across processes: permits of a global
-- concurrency cap and start times of a global rate. All keys share the
-- namespace's hash tag, so one call may cover several topics.
--
-- KEYS[2i-1]  topic i's permits ZSET: permit id -> expiry (unix µs by
--             Redis's clock); a permit whose holder stopped renewing it
--             lapses at expiry
-- KEYS[2i]    topic i's rate STRING: the earliest start time the next
--             job may have (unix µs; GCRA's theoretical arrival time)
-- ARGV[1]     now (unix µs), ARGV[2] a permit's lease (µs)
-- then per topic: cap (0: no cap), interval (µs between starts; 0: no
-- rate), n, then n pairs: permit id, the time the job is due (unix µs)
--
-- Each request gets, in order, the time its job may start (unix µs: its
-- due time or now, whichever is later, or the next free start of the
-- rate), or -1: the cap is reached (nothing was taken for it). A request
-- that gets a time holds a permit of the cap (if any) until that time
-- plus the lease, and takes its place in the rate (if any).
--
-- Start times are on the caller's clock (now); a permit's expiry is on
-- Redis's (TIME): its lease plus the wait until its start. So a process
-- whose wall clock is stepped forward does not purge live permits (its
-- own included) as lapsed.
local now, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local rnow = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
local a = 3
for i = 1, #KEYS / 2 do
  local held, ratek = KEYS[2 * i - 1], KEYS[2 * i]
  local cap, interval, n = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  local free = 0
  if cap > 0 then
    redis.call('ZREMRANGEBYSCORE', held, '-inf', rnow)
    free = cap - redis.call('ZCARD', held)
  end
  local tat = tonumber(redis.call('GET', ratek) or '0')
  for _ = 1, n do
    local id, due = ARGV[a], tonumber(ARGV[a + 1])
    a = a + 2
    if cap > 0 and free <= 0 then
      out[#out + 1] = -1
    else
      local s = math.max(due, now)
      if interval > 0 then
        s = math.max(s, tat)
        tat = s + interval
      end
      if cap > 0 then
        redis.call('ZADD', held, rnow + (s - now) + lease, id)
        free = free - 1
      end
      out[#out + 1] = s
    end
  end
  if interval > 0 and tat > now then
    redis.call('SET', ratek, string.format('%d', tat), 'PX', math.floor((tat - now) / 1000) + 1000)
  end
end
return out
