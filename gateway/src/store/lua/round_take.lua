-- KEYS[1]: the round's key. Taken once: read and deleted in one step (GETDEL needs Redis 6.2).
local round = redis.call('GET', KEYS[1])
if round then
  redis.call('DEL', KEYS[1])
end
return round
