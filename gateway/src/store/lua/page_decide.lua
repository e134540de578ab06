-- The approval page: keep the User's decision for one revision of one operation, unless that
-- revision has one already. One atomic step.
-- KEYS[1] the action's page decisions (a hash: "<operation_id> <revision>" -> "<until_ms> <decision>")
-- ARGV: field, decision, until_ms, now_ms
-- Returns {1} (kept) or {0, the value already kept}.
local now = tonumber(ARGV[4])
local kept = redis.call('HGET', KEYS[1], ARGV[1])
if kept then
  local until_ms = tonumber(string.match(kept, '^(%d+) '))
  if until_ms and until_ms > now then
    return {0, kept}
  end
end
-- Decisions whose time is up are dropped as new ones come.
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local until_ms = tonumber(string.match(all[i + 1], '^(%d+) '))
  if (not until_ms) or until_ms <= now then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. ' ' .. ARGV[2])
-- The hash lives as long as its longest-kept decision.
local wanted = tonumber(ARGV[3]) - now
if redis.call('PTTL', KEYS[1]) < wanted then
  redis.call('PEXPIRE', KEYS[1], wanted)
end
return {1}
