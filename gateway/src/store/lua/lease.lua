-- Set the lease of an operation's claim (longer or shorter), only while its record is in
-- flight under the owner: the end of an MCP round whose follow-up's outcome is unknown. One
-- atomic step.
-- KEYS[1] record, KEYS[2] the action's in-flight set, KEYS[3] the operators' index (only when
-- ARGV[4] = '1'). ARGV: owner, lease_until_ms, operation_id, indexed.
-- Returns 1 when set, 0 when the record is not in flight under the owner.
local fields = redis.call('HMGET', KEYS[1], 'state', 'owner')
if fields[1] ~= 'in_flight' or fields[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'lease_until', ARGV[2])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[2])
if ARGV[4] == '1' then
  redis.call('ZADD', KEYS[3], 'XX', ARGV[2], ARGV[3])
end
return 1
