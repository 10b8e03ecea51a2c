-- claim.lua: confirm that fired jobs are still pending, and read the
-- records the caller does not have. One call covers one or more
-- partitions (outside Redis Cluster, a batch's partitions share a call;
-- in a cluster each has its own).
--
-- KEYS     groups of 5, one per partition:
--            pending ZSET, jobs HASH, lease STRING,
--            running HASH (claim markers: job key -> lease token),
--            paused HASH (paused topics -> "1")
-- ARGV[1]  the byte budget: once the records returned by this call reach
--          it, jobs whose record would be returned are deferred instead
--          (the first record is returned whatever its size)
-- ARGV[2..] per partition, in the order of KEYS:
--            the caller's lease token ("" skips the fencing check),
--            then its jobs packed into one string (see unpacked), 3
--            fields per job: job key, the revision the caller holds (4
--            bytes; empty if none), the due time the caller expects (unix
--            µs in decimal; empty if it does not know). One string, not
--            arguments per job: the client boxes and Redis parses two
--            values, not thousands.
--
-- Returns, per call, a string: one status byte per job (in order), then
-- their scores ("," after each; empty for a gone job, and for one whose
-- score is the due time its caller expects, so that the common case reads
-- one byte per job). When records are returned, an array instead: that
-- string, then the records of the jobs whose status is 'r', in order. One
-- string per call, not two entries per job: the client reads one value or
-- a few, not thousands (each a string or number it would allocate).
--   g   the job is gone (done, cancelled or dead)
--   b   still pending at score, but a run of it is claimed already by
--       another owner (busy): do not run it now. The caller's own mark is
--       no obstacle: a claim whose reply was lost (Redis died) is claimed
--       again; the caller keeps track of its own runs in progress.
--   c   still pending at score; the caller's revision is current
--   r   still pending at score; here is the current record
--   C R as c and r, and a run of the job was claimed before by an owner
--       that is gone before its outcome was stored (its mark is "!": see
--       claimer in lib.lua): this run is a rerun, and may repeat work
--   d   still pending at score, but deferred (the budget is spent): not
--       marked, claim it again in another call
--   p   still pending at score, but its topic is paused: not marked, not
--       to run until the topic is resumed (the job stays pending as it is)
-- The caller runs a job only when score is the due time it fired for;
-- otherwise the job was rescheduled and is armed again at score. A job
-- returned as pending is marked running until settle.lua (op "a", "r", "d"
-- or "u") clears the mark; Cancel reports a marked job as running.
-- Fails with "WHEELQ_FENCED", changing nothing, when the caller does not
-- hold the lease of one of the partitions, so a process that lost a
-- partition never starts one of its jobs.
--
-- The jobs are read and marked with a few multi-key commands (ZMSCORE,
-- HMGET, HSET; Redis >= 6.2) rather than three commands each (fewer calls
-- out of Lua, and one reply table per command instead of per job).
-- packed(), unpacked(), many() and claimer() are lib.lua's, which the
-- store puts before this script.

local parts, fenced = packed(5, 2, 2, 1)
if fenced then
  return fenced
end

local budget, used = tonumber(ARGV[1]), 0
-- Records are read in chunks sized by the budget left and the mean size
-- of the records read so far (the first chunk: 4), so that a batch of
-- large records reads about the budget, not the whole batch (40 records
-- of 1 MiB read whole took a second); once the budget is spent, the jobs
-- not read yet are deferred unread (or reported gone or busy, which needs
-- no record). Every record read counts, also one the caller holds already
-- (status c), which is read whole only to compare its revision: counting
-- only the records returned let a batch of large jobs that the caller had
-- cached (a claim whose reply was lost, claimed again) read every record
-- of up to 1,024 jobs in one call, a second of Redis's time that outlasted
-- the caller's timeout, so the batch was claimed again and again.
local readBytes, readCount = 0, 0
-- A pending job's score as reported: '' when it is the due time its
-- caller expects.
local function reported(score, due)
  if due ~= '' and (score == due or tonumber(score) == tonumber(due)) then
    return ''
  end
  return score
end
local st, sc, out = {}, {}, {'', ''}
for _, pt in ipairs(parts) do
  local k, tok, data = pt[1], pt[2], ARGV[pt[3]]
  local cols, n = unpacked(data, 3)
  local keys, revs, dues = cols[1], cols[2], cols[3]
  if n > 0 then
    local scores = many('ZMSCORE', KEYS[k], keys)
    local marks = many('HMGET', KEYS[k + 3], keys)
    local recs, loaded = {}, 0
    local mark = {}
    -- The paused topics: one HLEN per partition when none is paused.
    local paused, anyPaused = {}, false
    if redis.call('HLEN', KEYS[k + 4]) > 0 then
      anyPaused = true
      local ts = redis.call('HKEYS', KEYS[k + 4])
      for i = 1, #ts do
        paused[ts[i]] = true
      end
    end
    for j = 1, n do
      if j > loaded and (readCount == 0 or readBytes < budget) then
        local size = 4
        if readCount > 0 then
          size = math.floor((budget - readBytes) / math.max(readBytes / readCount, 1)) + 1
          size = math.max(1, math.min(size, 256))
        end
        local hi = math.min(n, j + size - 1)
        local part = redis.call('HMGET', KEYS[k + 1], unpack(keys, j, hi))
        for i = 1, #part do
          recs[j + i - 1] = part[i]
          if part[i] then
            readBytes, readCount = readBytes + #part[i], readCount + 1
          end
        end
        loaded = hi
      end
      local score, rec, rev = scores[j], recs[j], revs[j]
      local owner = claimer(marks[j])
      local rerun = marks[j] and string.sub(marks[j], 1, 1) == '!'
      local mine = tok
      if rerun then
        mine = '!=' .. tok
      end
      if score and anyPaused and paused[string.match(keys[j], '^[^/]*')] then
        sc[#sc + 1] = reported(score, dues[j])
        st[#st + 1] = 'p'
      elseif score and j > loaded then
        -- Not read: the budget is spent. Busy, or claim it again in
        -- another call.
        sc[#sc + 1] = reported(score, dues[j])
        if (owner or tok) ~= tok then
          st[#st + 1] = 'b'
        else
          st[#st + 1] = 'd'
        end
      elseif not score or not rec then
        sc[#sc + 1] = ''
        st[#st + 1] = 'g'
      elseif (owner or tok) ~= tok then
        sc[#sc + 1] = reported(score, dues[j])
        st[#st + 1] = 'b'
      elseif rev ~= '' and string.sub(rec, 2, 5) == rev then
        mark[#mark + 1] = keys[j]
        mark[#mark + 1] = mine
        sc[#sc + 1] = reported(score, dues[j])
        st[#st + 1] = rerun and 'C' or 'c'
      elseif used > 0 and used + #rec > budget then
        sc[#sc + 1] = reported(score, dues[j])
        st[#st + 1] = 'd'
      else
        used = used + #rec
        mark[#mark + 1] = keys[j]
        mark[#mark + 1] = mine
        sc[#sc + 1] = reported(score, dues[j])
        st[#st + 1] = rerun and 'R' or 'r'
        out[#out + 1] = rec
      end
    end
    if #mark > 0 then
      many('HSET', KEYS[k + 3], mark)
    end
  end
end
sc[#sc + 1] = ''
local head = table.concat(st) .. table.concat(sc, ',')
if #out == 2 then
  return head -- no records: one string to read
end
out[1] = head
table.remove(out, 2)
return out
