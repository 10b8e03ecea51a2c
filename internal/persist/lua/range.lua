-- range.lua: a page of a sorted set in (score, member) order, after an
-- exclusive cursor, so that members removed since the last page (acked,
-- cancelled) cannot shift the page over members not yet read: paging by
-- score + offset skips as many unread members as were removed before the
-- offset.
--
-- KEYS[1]  the ZSET (pending or dead; member job key, score unix µs)
-- ARGV[1]  the cursor's score: the page starts after it
-- ARGV[2]  the cursor's member: "" starts after every member of ARGV[1]'s
--          score; otherwise after (ARGV[1], ARGV[2]) in the set's order
--          (by score, then by member byte by byte)
-- ARGV[3]  the page's highest score (inclusive)
-- ARGV[4]  the most members returned
--
-- Returns a flat array: member, score, member, score, ... (scores as
-- Redis prints them). Fewer than ARGV[4] members means the range is done.
--
-- The start is found by rank: ZCOUNT gives where the cursor's score
-- begins and ends, and a binary search over that run (ZRANGE by rank, one
-- member each) finds the first member after the cursor's. Members are
-- compared byte by byte (string.byte), not with Lua's '<', which collates
-- by the server's locale. O(log(n) * log(run) + page) per page.
local key, score, member, untilScore, limit = KEYS[1], ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])

local function after(a, b) -- a > b, byte by byte
  local la, lb = #a, #b
  for i = 1, math.min(la, lb) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return la > lb
end

local start
if member == '' then
  start = redis.call('ZCOUNT', key, '-inf', score)
else
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. score)
  local hi = redis.call('ZCOUNT', key, '-inf', score)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local m = redis.call('ZRANGE', key, mid, mid)[1]
    if after(m, member) then
      hi = mid
    else
      lo = mid + 1
    end
  end
  start = lo
end
-- The page ends at the range's last member (ZCOUNT up to untilScore), so
-- that members beyond the range (an hour ahead, say) are not read at all:
-- the poller asks for a page of every partition on every pass.
local stop = math.min(start + limit, redis.call('ZCOUNT', key, '-inf', untilScore)) - 1
if stop < start then
  return {}
end
return redis.call('ZRANGE', key, start, stop, 'WITHSCORES')
