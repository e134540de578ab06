-- Forget an in-flight claim: the gateway releasing its own (ARGV[1] 'owner', ARGV[2] the
-- owner) after the upstream provably performed nothing, or an operator resolving it as not
-- performed (ARGV[1] 'any', ARGV[2] the operator's clock in ms: only once the record's lease
-- ran out, since until then its forward may be at the upstream and a retry would be forwarded
-- again). The record is deleted; the generation counter is left alone, so the same approval
-- can be claimed again. One atomic step (`finishable` and `unlist`: finish_check.lua's,
-- prepended).
-- KEYS[1] record, KEYS[2] the action's in-flight set, KEYS[3] the operators' index (only
-- when ARGV[4] = '1'); ARGV: mode, owner, operation_id, indexed.
-- Returns 1 when deleted, 0 when there is no record, 2 when it is done (never deleted), 3 when
-- it is in flight under another owner, 4 when its lease is live (mode 'any').
if ARGV[1] ~= 'owner' and ARGV[1] ~= 'any' then
  return redis.error_reply('ERR unknown mode')
end
local _, answer = finishable(KEYS[1], ARGV[1], ARGV[2])
if answer == 0 then
  unlist(KEYS[2], KEYS[3], ARGV[3], ARGV[4])
end
if answer then
  return answer
end
redis.call('DEL', KEYS[1])
unlist(KEYS[2], KEYS[3], ARGV[3], ARGV[4])
return 1
