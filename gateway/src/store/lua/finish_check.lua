-- What complete.lua and release.lua share, prepended to each (store/redis/mod.rs): the checks
-- before a step that finishes an in-flight record, in one place, so that the gateway's own
-- completion and release and an operator's resolution agree on when a record may be finished.

-- Take operation `id` off its action's in-flight set and, when `indexed` is '1', off the
-- operators' index.
local function unlist(set_key, index_key, id, indexed)
  redis.call('HDEL', set_key, id)
  if indexed == '1' then
    redis.call('ZREM', index_key, id)
  end
end

-- The record's state, owner and lease, and nil when the step may go on, or else the script's
-- answer: 0 there is no record (mode 'restore' goes on), 2 it is done already, 3 it is in
-- flight under another owner than `owner_or_clock` (modes 'owner' and 'restore'), 4 its lease
-- is live at the operator's clock `owner_or_clock` (mode 'any'). Nothing is written.
local function finishable(record_key, mode, owner_or_clock)
  local fields = redis.call('HMGET', record_key, 'state', 'owner', 'lease_until')
  if not fields[1] then
    if mode == 'restore' then
      return fields, nil
    end
    return fields, 0
  end
  if fields[1] == 'done' then
    return fields, 2
  end
  if fields[1] ~= 'in_flight' then
    return fields, redis.error_reply('CORRUPT unknown record state')
  end
  if mode == 'any' then
    if tonumber(fields[3] or '0') >= tonumber(owner_or_clock) then
      return fields, 4
    end
  elseif fields[2] ~= owner_or_clock then
    return fields, 3
  end
  return fields, nil
end

