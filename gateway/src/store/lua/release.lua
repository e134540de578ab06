-- Forget a claim: delete the record only while it is in flight under ARGV[1].
-- The generation counter is left alone. One atomic step.
-- KEYS[1] record; ARGV: owner. Returns 1 when deleted, 0 otherwise.
local fields = redis.call('HMGET', KEYS[1], 'state', 'owner')
if fields[1] == 'in_flight' and fields[2] == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
