-- Claim an operation: create its in-flight record unless one exists. One atomic step.
-- An in-flight record has no expiry: only complete, release and an operator's resolve end it,
-- so an operation whose outcome is unknown is never forgotten.
-- KEYS[1] record, KEYS[2] the action's in-flight set (a hash: operation_id -> lease_until;
-- same hash tag, same cluster slot), KEYS[3] the operators' index (a sorted set by lease_until;
-- only on a single node, ARGV[8] = '1': on a cluster it lives in another slot and the gateway
-- writes it itself)
-- ARGV: scope, policy, revision, created_at_ms, owner, lease_until_ms, operation_id, indexed,
--   credentials (a keyed digest, or '' for none: the field is then not written),
--   trace (the executing span's traceparent, or '' for none: likewise),
--   request (a keyed digest of a page approval's request, or '' for none: likewise)
-- Returns the existing record (HGETALL pairs) or 1 when this call created it.
local existing = redis.call('HGETALL', KEYS[1])
if #existing > 0 then
  return existing
end
redis.call('HSET', KEYS[1],
  'v', '1',
  'scope', ARGV[1],
  'policy', ARGV[2],
  'revision', ARGV[3],
  'created_at', ARGV[4],
  'state', 'in_flight',
  'owner', ARGV[5],
  'lease_until', ARGV[6])
redis.call('HSET', KEYS[2], ARGV[7], ARGV[6])
if ARGV[8] == '1' then
  redis.call('ZADD', KEYS[3], ARGV[6], ARGV[7])
end
if ARGV[9] and ARGV[9] ~= '' then
  redis.call('HSET', KEYS[1], 'credentials', ARGV[9])
end
if ARGV[10] and ARGV[10] ~= '' then
  redis.call('HSET', KEYS[1], 'trace', ARGV[10])
end
if ARGV[11] and ARGV[11] ~= '' then
  redis.call('HSET', KEYS[1], 'request', ARGV[11])
end
return 1
