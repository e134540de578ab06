-- KEYS[1]: the round's key. ARGV: what a follow-up needs, how long it waits (ms, > 0).
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
