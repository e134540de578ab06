-- Conversations: a handler's answer to the message it took (ARGV[2] 'answer'), kept until
-- ARGV[4], or letting it go unanswered (ARGV[2] 'forget'). Nothing changes unless the
-- message is still this handler's. One atomic step.
-- KEYS[1] the message; ARGV: owner, mode, answer, remember_until_ms
-- Returns 1 when done, 0 when the message was not this handler's.
local fields = redis.call('HMGET', KEYS[1], 'state', 'owner')
if fields[1] ~= 'busy' or fields[2] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[2] == 'answer' then
  redis.call('HSET', KEYS[1], 'state', 'done', 'answer', ARGV[3])
  redis.call('PEXPIREAT', KEYS[1], ARGV[4])
end
return 1
