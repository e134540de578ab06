-- Keep a round of an interim answer for its follow-up, and keep the operation's claim leased
-- until the round (and the follow-up's forward) could end: retries are told "in progress"
-- while the round waits, "unknown" only after. Only for a record in flight under the owner;
-- a lease is never shortened. One atomic step.
-- KEYS[1] round, KEYS[2] record, KEYS[3] the action's in-flight set, KEYS[4] the operators'
-- index (only when ARGV[6] = '1').
-- ARGV: round, ttl_ms (> 0), owner, lease_until_ms, operation_id, indexed.
-- Returns 1 when kept, 0 when the record is not in flight under the owner (nothing written).
local fields = redis.call('HMGET', KEYS[2], 'state', 'owner', 'lease_until')
if fields[1] ~= 'in_flight' or fields[2] ~= ARGV[3] then
  return 0
end
if tonumber(fields[3] or '0') < tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[2], 'lease_until', ARGV[4])
  redis.call('HSET', KEYS[3], ARGV[5], ARGV[4])
  if ARGV[6] == '1' then
    redis.call('ZADD', KEYS[4], 'XX', ARGV[4], ARGV[5])
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
