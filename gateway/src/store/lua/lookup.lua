-- What an approval reads first, in one step: its operation's record and its action's
-- generation (both keys carry the action tag: one slot).
-- KEYS[1] record, KEYS[2] generation counter
-- Returns {HGETALL pairs (empty when there is no record), the counter or false}.
return {redis.call('HGETALL', KEYS[1]), redis.call('GET', KEYS[2])}
