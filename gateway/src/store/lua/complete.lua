-- Record the answer of an in-flight operation and move the action's generation on: the
-- gateway completing its own claim (ARGV[1] 'owner', ARGV[2] the owner), or an operator
-- resolving it as performed (ARGV[1] 'any': whoever owns it, lease expired or not).
-- One atomic step: nothing changes unless the record is in flight (under that owner). Every
-- check that can fail runs before the first write, since a script error does not roll back.
-- KEYS[1] record, KEYS[2] generation counter (same hash tag, same cluster slot)
-- ARGV: mode, owner, status, headers, body, remember_until_ms
-- Returns 1 when recorded, 0 when there is no record, 2 when it is done already, 3 when it is
-- in flight under another owner.
if ARGV[1] ~= 'owner' and ARGV[1] ~= 'any' then
  return redis.error_reply('ERR unknown mode')
end
local fields = redis.call('HMGET', KEYS[1], 'state', 'owner')
if not fields[1] then
  return 0
end
if fields[1] == 'done' then
  return 2
end
if fields[1] ~= 'in_flight' then
  return redis.error_reply('CORRUPT unknown record state')
end
if ARGV[1] == 'owner' and fields[2] ~= ARGV[2] then
  return 3
end
local counter = redis.call('GET', KEYS[2])
if counter and not string.match(counter, '^%d+$') then
  return redis.error_reply('CORRUPT generation counter is not a number')
end

local remember_until = tonumber(ARGV[6])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- Expire `key` at remember_until unless it already expires later (or never). PEXPIREAT's GT
-- option would do this, but it needs Redis 7.
local function keep_until(key)
  local ttl = redis.call('PTTL', key)
  if ttl >= 0 and now + ttl < remember_until then
    redis.call('PEXPIREAT', key, ARGV[6])
  end
end

redis.call('HSET', KEYS[1],
  'state', 'done',
  'status', ARGV[3],
  'headers', ARGV[4],
  'body', ARGV[5])
redis.call('HDEL', KEYS[1], 'owner', 'lease_until')
keep_until(KEYS[1])

redis.call('INCR', KEYS[2])
if counter then
  keep_until(KEYS[2])
else
  -- A new counter has no expiry yet; give it one so it is forgotten with its records.
  redis.call('PEXPIREAT', KEYS[2], ARGV[6])
end
return 1
