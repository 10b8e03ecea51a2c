-- lib.lua: helpers that the store puts before the scripts that use them
-- (claim.lua, settle.lua, cancel.lua, reschedule.lua): a script sent to
-- Redis is one text.
--
-- partitions(stride, lease, a, per, unfenced) walks a call's partitions:
-- KEYS in groups of stride, one per partition, the lease STRING at offset
-- lease of a group; ARGV from a on, per partition its token, its count n
-- and n groups of per arguments. Unless unfenced, it checks every token
-- first ("" skips the check) and returns nil and a WHEELQ_FENCED error
-- reply if one is not its lease's, so that a refusal changes nothing. It
-- returns a list, per partition, of {index of its first key, token, index
-- of its first item's first argument, n}.
--
-- packed(stride, lease, a, args) walks a call's partitions as partitions
-- does, for a script that takes a partition's items packed into a few
-- strings (claim.lua, settle.lua): ARGV from a on, per partition its token
-- and args packed arguments. It checks every token first, the same way,
-- and returns a list, per partition, of {index of its first key, token,
-- index of its first packed argument}, nil, and the index of the argument
-- after the partitions' (see unpacked).
--
-- unpacked(s, per, extra) splits a packed argument (store.go's
-- appendField) into per columns: s is items of per fields each, a field a
-- 4-byte big-endian length and as many bytes, or the length 2^32-1 alone
-- for a field sent as an argument of its own (a large record, not copied
-- into the packed one): the next of ARGV[extra], ARGV[extra + 1], ... It
-- returns the columns (tables of strings), the number of items and the
-- index of the next argument of its own. (Plain string functions: the
-- struct library is not on every server that runs these scripts, miniredis
-- for one.)
--
-- column(first, n, per, off) returns, of n items of per arguments each
-- from ARGV[first] on, every item's argument at offset off (a partition's
-- job keys, say).
--
-- finished(idx, hist, entries, now, maxAge, maxCount) adds finished jobs to
-- a partition's run history: entries are pairs of job key and entry (an
-- outcome byte and the job's record cut before its payload: see cut),
-- idx a ZSET job key -> finish time (unix µs, now), hist a HASH job key ->
-- entry. Then it trims the history to those finished within maxAge µs
-- and, once it holds more than maxCount + floor(maxCount / 64), to
-- maxCount entries, oldest first, removing at most as many as it added
-- plus 64 plus that step (so it keeps up, and a call's work stays
-- bounded). maxCount 0 keeps no history. The numbers it passes to Redis
-- go as text made with decimal(): the finish time and the age limit are
-- written once per call of the script, not once per partition.
--
-- decimal(n) is the text of a whole number n, kept for the rest of the
-- call: Lua's own text of a number (tostring, or a number passed to
-- redis.call) and '%.0f' are a floating-point printf, thousands of
-- instructions in Redis each (docs/benchmarks-history.md); a small n is
-- written with the integer format instead.
--
-- cut(rec) returns a record without its payload: the payload is a
-- version 2 record's last bytes, its length the third varint after byte 9
-- (record.go). A record of version 1 (no length) or one it cannot parse
-- is returned whole.
--
-- many(cmd, key, args) runs the multi-key command cmd on key with args,
-- at most 1000 arguments per call (so that unpack stays far from Lua's
-- stack limit), and returns the replies joined: a table, or the sum of
-- integer replies. args must split evenly (an even count for field/value
-- pairs).
-- claimer(mark) returns the token of the owner that claimed a run of a
-- job, from its claim mark (the running HASH's value), or nil: a mark is
-- a token (an unfenced call's is ""), or "!=" and a token, or "!" alone.
-- The "!" says that a run of the job was claimed by an owner that is gone
-- before its outcome was stored (a take-over, or repair, turned its mark
-- into "!"): the job's next run is a rerun (claim.lua's 'C' and 'R'), and
-- keeps the "!" until an outcome is stored. No token starts with "!"
-- (Config.InstanceID may not).
local function claimer(mark)
  if not mark or mark == '!' then
    return nil
  end
  if string.sub(mark, 1, 2) == '!=' then
    return string.sub(mark, 3)
  end
  return mark
end

local function many(cmd, key, args)
  if #args <= 1000 then
    return redis.call(cmd, key, unpack(args))
  end
  local res, sum = {}, 0
  for i = 1, #args, 1000 do
    local part = redis.call(cmd, key, unpack(args, i, math.min(i + 999, #args)))
    if type(part) == 'table' then
      for j = 1, #part do
        res[#res + 1] = part[j]
      end
    else
      sum = sum + part
    end
  end
  if #res > 0 then
    return res
  end
  return sum
end


local function partitions(stride, lease, a, per, unfenced)
  local parts = {}
  for k = 1, #KEYS, stride do
    local tok, n = ARGV[a], tonumber(ARGV[a + 1])
    if not unfenced and tok ~= '' and redis.call('GET', KEYS[k + lease]) ~= tok then
      return nil, redis.error_reply('WHEELQ_FENCED partition lease is held by another owner')
    end
    parts[#parts + 1] = {k, tok, a + 2, n}
    a = a + 2 + per * n
  end
  return parts
end

local function packed(stride, lease, a, args)
  local parts = {}
  for k = 1, #KEYS, stride do
    local tok = ARGV[a]
    if tok ~= '' and redis.call('GET', KEYS[k + lease]) ~= tok then
      return nil, redis.error_reply('WHEELQ_FENCED partition lease is held by another owner')
    end
    parts[#parts + 1] = {k, tok, a + 1}
    a = a + 1 + args
  end
  return parts, nil, a
end

local function unpacked(s, per, extra)
  local cols, i, n = {}, 1, 0
  for c = 1, per do
    cols[c] = {}
  end
  while i <= #s do
    n = n + 1
    for c = 1, per do
      local a, b, x, d = string.byte(s, i, i + 3)
      local len = ((a * 256 + b) * 256 + x) * 256 + d
      if len == 4294967295 then
        cols[c][n] = ARGV[extra]
        extra = extra + 1
        i = i + 4
      elseif len == 0 then
        cols[c][n] = ''
        i = i + 4
      else
        cols[c][n] = string.sub(s, i + 4, i + 3 + len)
        i = i + 4 + len
      end
    end
  end
  return cols, n, extra
end

local function column(first, n, per, off)
  local t = {}
  for j = 1, n do
    t[j] = ARGV[first + per * (j - 1) + off]
  end
  return t
end

local function cut(rec)
  local v = string.byte(rec, 1)
  if not v or v < 0x20 then
    return rec
  end
  -- Three one-byte varints (small attempts and payload): one read.
  local a, b, c = string.byte(rec, 10, 12)
  if c and a < 128 and b < 128 and c < 128 then
    if c > #rec - 12 then
      return rec
    end
    return string.sub(rec, 1, #rec - c)
  end
  local i, n = 10, 0
  for _ = 1, 3 do
    local x, mul = 0, 1
    while true do
      local b = string.byte(rec, i)
      if not b then
        return rec
      end
      i = i + 1
      if b < 128 then
        x = x + b * mul
        break
      end
      x = x + (b - 128) * mul
      mul = mul * 128
    end
    n = x
  end
  if n > #rec - i + 1 then
    return rec
  end
  return string.sub(rec, 1, #rec - n)
end

local decimals = {}
local function decimal(n)
  local s = decimals[n]
  if not s then
    if n > -2147483648 and n < 2147483648 then
      s = string.format('%d', n) -- Lua's %d is a C long: 32 bits on some builds
    else
      s = string.format('%.0f', n)
    end
    decimals[n] = s
  end
  return s
end

local function finished(idx, hist, entries, now, maxAge, maxCount)
  if maxCount <= 0 or #entries == 0 then
    return
  end
  -- Scores are whole µs past 2^50: written as integers, not as Lua's
  -- tostring would (14 significant digits).
  local score = decimal(now)
  local scores = {}
  for j = 1, #entries, 2 do
    scores[j] = score
    scores[j + 1] = entries[j]
  end
  many('HSET', hist, entries) -- the pairs are the hash's fields and values
  many('ZADD', idx, scores)
  -- Past maxCount the history is trimmed in steps of a 64th of it: a
  -- full history (a busy queue's) pays for the reading and the removal
  -- once per step, not once per call.
  local step = math.floor(maxCount / 64)
  local limit = #entries / 2 + 64 + step
  local old = redis.call('ZRANGEBYSCORE', idx, '-inf', '(' .. decimal(now - maxAge), 'LIMIT', '0', decimal(limit))
  local over = redis.call('ZCARD', idx) - #old - maxCount
  if over > step and #old < limit then
    local more = redis.call('ZRANGE', idx, decimal(#old), decimal(#old + math.min(over, limit - #old) - 1))
    for _, k in ipairs(more) do
      old[#old + 1] = k
    end
  end
  if #old > 0 then
    many('ZREM', idx, old)
    many('HDEL', hist, old)
  end
end
