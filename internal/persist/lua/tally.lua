-- tally.lua: count the members of a sorted set by topic, a page of ranks
-- at a time (Counts reads every member once; each call does bounded
-- work).
--
-- KEYS[1]  the ZSET (pending or dead; member job key "topic/id")
-- ARGV[1]  the first rank of the page (0 to start)
-- ARGV[2]  the page's size
-- ARGV[3]  a score (unix µs): members scored below it are counted apart
--          (the overdue ones of the pending set)
--
-- Returns a flat array: the next page's first rank (-1: the set is done),
-- then per topic met in the page: topic, members, members scored below
-- ARGV[3]. Members moved meanwhile shift the ranks: a count is not a
-- snapshot (a job that moves between calls may be counted twice or not at
-- all).
--
-- The members scored below ARGV[3] are those ranked below ZCOUNT's
-- answer, so the page is read without scores, and a member's topic is cut
-- at its first '/' with a plain find (no pattern): the cost per member is
-- a table lookup and an add.
local key, start, size = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local low = redis.call('ZCOUNT', key, '-inf', '(' .. ARGV[3])
local page = redis.call('ZRANGE', key, start, start + size - 1)
local n, below, order = {}, {}, {}
local find, sub = string.find, string.sub
for i = 1, #page do
  local m = page[i]
  local cut = find(m, '/', 1, true)
  local topic = m
  if cut then
    topic = sub(m, 1, cut - 1)
  end
  local c = n[topic]
  if not c then
    c = 0
    below[topic] = 0
    order[#order + 1] = topic
  end
  n[topic] = c + 1
  if start + i - 1 < low then
    below[topic] = below[topic] + 1
  end
end
local out = {-1}
if #page == size then
  out[1] = start + size
end
for _, topic in ipairs(order) do
  out[#out + 1] = topic
  out[#out + 1] = n[topic]
  out[#out + 1] = below[topic]
end
return out
