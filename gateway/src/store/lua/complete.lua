-- Record the answer of an in-flight operation and move the action's generation on: the
-- gateway completing its own claim (ARGV[1] 'owner', ARGV[2] the owner), the same when the
-- record vanished meanwhile (ARGV[1] 'restore': Redis restarted empty, or an operator
-- resolved it as not performed while it was being forwarded; the upstream did perform it, so
-- the answer is written as a new record), or an operator resolving it as performed
-- (ARGV[1] 'any', ARGV[2] the operator's clock in ms: whoever owns it, once its lease ran
-- out; while it is live the forward may be at the upstream).
-- `finishable` and `unlist` are finish_check.lua's, prepended. One atomic step: nothing changes unless the record is in flight (under that owner). Every
-- check that can fail runs before the first write, since a script error does not roll back.
-- KEYS[1] record, KEYS[2] generation counter, KEYS[3] the action's in-flight set (same hash
-- tag, same cluster slot), KEYS[4] the operators' index (only when ARGV[8] = '1')
-- ARGV: mode, owner, status, headers, body, remember_until_ms, operation_id, indexed;
-- 'restore' adds scope, policy, revision, created_at_ms, credentials ('' for none), request
-- (likewise)
-- Returns 1 when recorded, 0 when there is no record, 2 when it is done already, 3 when it is
-- in flight under another owner, 4 when its lease is live (mode 'any').
local mode = ARGV[1]
if mode ~= 'owner' and mode ~= 'any' and mode ~= 'restore' then
  return redis.error_reply('ERR unknown mode')
end
local fields, answer = finishable(KEYS[1], mode, ARGV[2])
if answer == 0 then
  unlist(KEYS[3], KEYS[4], ARGV[7], ARGV[8])
end
if answer then
  return answer
end
local counter = redis.call('GET', KEYS[2])
if counter and not string.match(counter, '^%d+$') then
  return redis.error_reply('CORRUPT generation counter is not a number')
end

local remember_until = tonumber(ARGV[6])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- Expire `key` at remember_until unless it already expires later. A key without an expiry
-- (an in-flight record, or a new one) gets one. PEXPIREAT's GT option would do most of this,
-- but it needs Redis 7.
local function keep_until(key)
  local ttl = redis.call('PTTL', key)
  if ttl < 0 or now + ttl < remember_until then
    redis.call('PEXPIREAT', key, ARGV[6])
  end
end

if not fields[1] then
  redis.call('HSET', KEYS[1],
    'v', '1',
    'scope', ARGV[9],
    'policy', ARGV[10],
    'revision', ARGV[11],
    'created_at', ARGV[12])
  if ARGV[13] and ARGV[13] ~= '' then
    redis.call('HSET', KEYS[1], 'credentials', ARGV[13])
  end
  if ARGV[14] and ARGV[14] ~= '' then
    redis.call('HSET', KEYS[1], 'request', ARGV[14])
  end
end
redis.call('HSET', KEYS[1],
  'state', 'done',
  'status', ARGV[3],
  'headers', ARGV[4],
  'body', ARGV[5])
redis.call('HDEL', KEYS[1], 'owner', 'lease_until')
keep_until(KEYS[1])
unlist(KEYS[3], KEYS[4], ARGV[7], ARGV[8])

redis.call('INCR', KEYS[2])
keep_until(KEYS[2])
return 1
