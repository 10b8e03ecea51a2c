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
-- column(first, n, per, off) returns, of n items of per arguments each
-- from ARGV[first] on, every item's argument at offset off (a partition's
-- job keys, say).
--
-- many(cmd, key, args) runs the multi-key command cmd on key with args,
-- at most 1000 arguments per call (so that unpack stays far from Lua's
-- stack limit), and returns the replies joined: a table, or the sum of
-- integer replies. args must split evenly (an even count for field/value
-- pairs).
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

local function column(first, n, per, off)
  local t = {}
  for j = 1, n do
    t[j] = ARGV[first + per * (j - 1) + off]
  end
  return t
end
