-- recur.lua: the recurring schedules of one partition, and the jobs of
-- their slots, which all live in the partition of their schedule.
--
-- KEYS[1]  pending ZSET        KEYS[2]  jobs HASH
-- KEYS[3]  lease STRING        KEYS[4]  loaded STRING
-- KEYS[5]  inbox LIST          KEYS[6]  running HASH
-- KEYS[7]  recur HASH: schedule name -> spec (JSON)
-- KEYS[8]  recur-state HASH: name -> the latest slot stored (unix µs, the
--          watermark); name .. "\0r" -> the latest slots stored, up to 8,
--          comma-separated; name .. "\0d" -> the slots after the watermark
--          that already ran (or run, or were cancelled) under a spec since
--          replaced, comma-separated: a fill passes over them; kept until
--          their time has passed
-- ARGV[1]  op
--
-- op "declare": ARGV[2] name, ARGV[3] the new spec, ARGV[4] the spec the
--   caller read ("" none), ARGV[5] the new watermark for a changed spec,
--   ARGV[6] the watermark the caller read, ARGV[7..] pairs of due (unix
--   µs) and key of the old spec's stored slots still to come (up to that
--   watermark): each is dropped, unless a run of it is claimed; one that
--   is claimed, or is gone (it ran early, by RunNow or on a host whose
--   clock is ahead, or was cancelled), is kept in name .. "\0d", so that
--   the new spec does not store that slot again. Returns 0 (the same spec:
--   nothing done), 1 (stored) or -1 (the stored spec, or the watermark, is
--   not the one read: a fill stored more slots meanwhile; read again).
-- op "remove": ARGV[2] name, ARGV[3] the spec read, ARGV[4] the watermark
--   read, ARGV[5..] keys to drop. Returns 1, 0 (no such schedule) or -1
--   (changed: read again).
-- op "fill": ARGV[2] the caller's lease token ("" none), ARGV[3] name,
--   ARGV[4] the spec the slots were computed from, ARGV[5] a floor: the
--   watermark is raised to it first (slots skipped by the missed-slot
--   policy), ARGV[6..] groups of 3: due (unix µs, ascending), job key,
--   record. A slot at or before the watermark is stored already (or was
--   skipped, or ran): it is passed over, so that each slot's job is
--   stored once, whatever the number of callers and their clocks. Returns
--   -1 if the spec changed or was removed, else the number of jobs stored,
--   then their keys.
local op = ARGV[1]

local function drop(key)
  if redis.call('HEXISTS', KEYS[6], key) == 0 then
    redis.call('ZREM', KEYS[1], key)
    redis.call('HDEL', KEYS[2], key)
  end
end

-- readDone returns the done slots of schedule name (NAME\0d), as stored.
local function readDone(name)
  local list = {}
  for s in string.gmatch(redis.call('HGET', KEYS[8], name .. '\0d') or '', '[^,]+') do
    list[#list + 1] = s
  end
  return list
end

-- writeDone stores the entries of list after t (unix µs) as the done
-- slots of schedule name; with none, the field goes.
local function writeDone(name, list, t)
  local keep = {}
  for _, s in ipairs(list) do
    if tonumber(s) > t then keep[#keep + 1] = s end
  end
  if #keep > 0 then
    redis.call('HSET', KEYS[8], name .. '\0d', table.concat(keep, ','))
  else
    redis.call('HDEL', KEYS[8], name .. '\0d')
  end
end

if op == 'declare' or op == 'remove' then
  local name = ARGV[2]
  local cur = redis.call('HGET', KEYS[7], name) or ''
  local read = ARGV[6]
  local first = 7
  if op == 'declare' then
    if cur == ARGV[3] then return 0 end
    if cur ~= ARGV[4] then return -1 end
  else
    if cur == '' then return 0 end
    if cur ~= ARGV[3] then return -1 end
    read, first = ARGV[4], 5
  end
  if tonumber(redis.call('HGET', KEYS[8], name) or '0') ~= tonumber(read) then
    return -1 -- slots were stored (or the schedule changed) since the read
  end
  if op == 'declare' then
    local wm = tonumber(redis.call('HGET', KEYS[8], name) or '0')
    local done = {}
    if cur ~= '' then
      wm = tonumber(ARGV[5])
      done = readDone(name)
    end
    for i = first, #ARGV, 2 do
      local due, key = ARGV[i], ARGV[i + 1]
      if redis.call('HEXISTS', KEYS[2], key) == 0 or redis.call('HEXISTS', KEYS[6], key) == 1 then
        done[#done + 1] = due
      else
        drop(key)
      end
    end
    redis.call('HSET', KEYS[7], name, ARGV[3])
    redis.call('HSET', KEYS[8], name, string.format('%d', wm))
    writeDone(name, done, wm)
  else
    for i = first, #ARGV do drop(ARGV[i]) end
    redis.call('HDEL', KEYS[7], name)
    redis.call('HDEL', KEYS[8], name, name .. '\0r', name .. '\0d')
  end
  return 1
end

-- fill
local name = ARGV[3]
if redis.call('HGET', KEYS[7], name) ~= ARGV[4] then return {-1} end
local wm = tonumber(redis.call('HGET', KEYS[8], name) or '0')
wm = math.max(wm, tonumber(ARGV[5]))
local loaded = tonumber(redis.call('GET', KEYS[4]) or '')
local owner = ARGV[2] ~= '' and redis.call('GET', KEYS[3]) == ARGV[2]
local recent = {}
for s in string.gmatch(redis.call('HGET', KEYS[8], name .. '\0r') or '', '[^,]+') do
  recent[#recent + 1] = s
end
local dones = readDone(name)
local done = {}
for _, s in ipairs(dones) do done[tonumber(s)] = true end
local out = {0}
for i = 6, #ARGV, 3 do
  local due, key, rec = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
  if due > wm then
    if done[due] then
      -- this slot ran under the spec replaced: once is its share
    elseif redis.call('HSETNX', KEYS[2], key, rec) == 1 then
      redis.call('ZADD', KEYS[1], due, key)
      if loaded and not owner and due <= loaded then
        redis.call('RPUSH', KEYS[5], key)
      end
      out[1] = out[1] + 1
      out[#out + 1] = key
    end
    wm = due
    recent[#recent + 1] = ARGV[i]
  end
end
while #recent > 8 do table.remove(recent, 1) end
redis.call('HSET', KEYS[8], name, string.format('%d', wm), name .. '\0r', table.concat(recent, ','))
if #dones > 0 then
  -- Kept until their time has passed (by Redis's clock), not the
  -- watermark: a later change may set the watermark back to now.
  local t = redis.call('TIME')
  writeDone(name, dones, tonumber(t[1]) * 1000000 + tonumber(t[2]))
end
return out
