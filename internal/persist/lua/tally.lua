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
local start, size, before = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local page = redis.call('ZRANGE', KEYS[1], start, start + size - 1, 'WITHSCORES')
local n, low, order = {}, {}, {}
for i = 1, #page, 2 do
  local topic = string.match(page[i], '^[^/]*')
  if not n[topic] then
    n[topic], low[topic] = 0, 0
    order[#order + 1] = topic
  end
  n[topic] = n[topic] + 1
  if tonumber(page[i + 1]) < before then
    low[topic] = low[topic] + 1
  end
end
local out = {-1}
if #page == 2 * size then
  out[1] = start + size
end
for _, topic in ipairs(order) do
  out[#out + 1] = topic
  out[#out + 1] = n[topic]
  out[#out + 1] = low[topic]
end
return out
