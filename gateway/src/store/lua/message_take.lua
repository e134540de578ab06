-- Conversations: take a Personal Agent's message for one handler, unless it was answered or
-- another handler's lease on it still runs. One atomic step.
-- KEYS[1] the message (a hash: state 'busy' with owner and lease, or 'done' with the answer)
-- ARGV: owner, now_ms, lease_until_ms
-- Returns {'done', answer}, {'busy'} or {'taken'}.
local fields = redis.call('HMGET', KEYS[1], 'state', 'lease', 'answer')
if fields[1] == 'done' then
  return {'done', fields[3]}
end
if fields[1] == 'busy' and tonumber(fields[2]) >= tonumber(ARGV[2]) then
  return {'busy'}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'busy', 'owner', ARGV[1], 'lease', ARGV[3])
-- A handler that died leaves its lease behind: gone a minute after it lapsed.
redis.call('PEXPIREAT', KEYS[1], tonumber(ARGV[3]) + 60000)
return {'taken'}
