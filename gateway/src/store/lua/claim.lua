-- Claim an operation: create its in-flight record unless one exists. One atomic step.
-- KEYS[1] record
-- ARGV: scope, policy, revision, created_at_ms, owner, lease_until_ms, remember_until_ms,
--   credentials (a keyed digest, or '' for none: the field is then not written)
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
if ARGV[8] and ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'credentials', ARGV[8])
end
redis.call('PEXPIREAT', KEYS[1], ARGV[7])
return 1
