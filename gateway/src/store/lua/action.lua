-- What a new request for an action (a mint) reads, in one step: the action's generation and
-- its in-flight operations (both keys carry the action tag: one slot).
-- KEYS[1] generation counter, KEYS[2] the action's in-flight set
-- Returns {the counter or false, HGETALL pairs of operation_id -> lease_until}.
return {redis.call('GET', KEYS[1]), redis.call('HGETALL', KEYS[2])}
