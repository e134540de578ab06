-- Forget an in-flight claim: the gateway releasing its own (ARGV[1] 'owner', ARGV[2] the
-- owner) after the upstream provably performed nothing, or an operator resolving it as not
-- performed (ARGV[1] 'any', ARGV[2] the operator's clock in ms: only once the record's lease
-- ran out, since until then its forward may be at the upstream and a retry would be forwarded
-- again). The record is deleted; the generation counter is left alone, so the same approval
-- can be claimed again. One atomic step.
-- KEYS[1] record, KEYS[2] the action's in-flight set, KEYS[3] the operators' index (only
-- when ARGV[4] = '1'); ARGV: mode, owner, operation_id, indexed.
-- Returns 1 when deleted, 0 when there is no record, 2 when it is done (never deleted), 3 when
-- it is in flight under another owner, 4 when its lease is live (mode 'any').
if ARGV[1] ~= 'owner' and ARGV[1] ~= 'any' then
  return redis.error_reply('ERR unknown mode')
end
local function unlist()
  redis.call('HDEL', KEYS[2], ARGV[3])
  if ARGV[4] == '1' then
    redis.call('ZREM', KEYS[3], ARGV[3])
  end
end
local fields = redis.call('HMGET', KEYS[1], 'state', 'owner', 'lease_until')
if not fields[1] then
  unlist()
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
if ARGV[1] == 'any' and tonumber(fields[3] or '0') >= tonumber(ARGV[2]) then
  return 4
end
redis.call('DEL', KEYS[1])
unlist()
return 1
