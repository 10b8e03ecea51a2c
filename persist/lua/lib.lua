-- lib.lua: helpers that the store puts before the scripts that use them
-- (claim.lua, settle.lua): a script sent to Redis is one text.
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

