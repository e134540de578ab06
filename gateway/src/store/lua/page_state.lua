-- What a request without the extension reads, in one step: the action's generation, its
-- in-flight operations and its page decisions (every key carries the action tag: one slot).
-- KEYS[1] generation counter, KEYS[2] the action's in-flight set, KEYS[3] its page decisions
-- Returns {the counter or false, HGETALL of the in-flight set, HGETALL of the decisions}.
return {redis.call('GET', KEYS[1]), redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[3])}
