-- topics.lua: record how topics are consumed (a handler, or pulled by
-- consumers), refusing a topic recorded the other way.
--
-- KEYS[1]  the namespace's topics HASH (topic -> "handler" or "pull")
-- ARGV[1]  the channel on which a change is announced ("topics ")
-- ARGV[2..] pairs of topic and mode
--
-- Returns nil when every topic is recorded with its mode, else {topic,
-- recorded mode} of the first conflict, changing nothing.
for i = 2, #ARGV, 2 do
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  if cur and cur ~= ARGV[i + 1] then
    return {ARGV[i], cur}
  end
end
local changed = false
for i = 2, #ARGV, 2 do
  if redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
    changed = true
  end
end
if changed then
  redis.call('PUBLISH', ARGV[1], 'topics ')
end
return nil
