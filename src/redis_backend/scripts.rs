//! The Lua scripts: every decision is one script, atomic and one round trip.

/// GCRA. KEYS[1]: the limiter key. ARGV[1]: emission interval (µs), ARGV[2]: burst.
/// Returns {1, 0} when admitted (the new TAT is stored), {0, retry_after_µs} when refused
/// (nothing is written).
pub(super) const GCRA_LUA: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - interval * tonumber(ARGV[2])
if now < allow_at then
  return {0, allow_at - now}
end
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000))
return {1, 0}
";

/// Idempotency claim. KEYS[1]: the entry, KEYS[2]: the epoch, KEYS[3]: the recovery marker,
/// KEYS[4]: the young-epoch marker (lives for the recovery time after an epoch is made),
/// KEYS[5]: the run marker (see [`EPOCH_LUA`]).
/// ARGV[1]: fingerprint, ARGV[2]: the new token, ARGV[3]: lease (ms), ARGV[4]: entry TTL (ms),
/// ARGV[5]: the epoch the caller knows ('' if none), ARGV[6]: a new epoch in case there is none,
/// ARGV[7]: the recovery time (ms), ARGV[8]: 'hold' or 'resend' for an orphaned delivery.
///
/// An absent epoch means Redis lost its data (or never had any): a caller that knew an epoch
/// starts the recovery time, during which free keys are not handed out (the replicas put back
/// what they know first). A caller that knew another epoch and finds a young one starts it too:
/// a replica that started fresh made the epoch first (it cannot tell a restarted Redis from a
/// new one), and the replicas that remember the lost data must still put it back. A Redis that
/// restarted with its data (see [`EPOCH_LUA`]) gets a new epoch and the recovery time too.
/// While it runs, a claim whose lease ran out is not taken over either: it may be a stale
/// claim a snapshot brought back, which a replica's put-back replaces with the outcome.
/// Returns {'epoch', e} when the caller's epoch is not Redis's,
/// {'done', fp, reply}, {'held', fp, ref[, 'orphan']}, {'inflight', fp, lease_left_ms},
/// {'recovering', ms}, {'reserved'} or {'reserved', 'orphan', ref} (taken over from a replica
/// whose lease ran out while it delivered).
pub(super) const RESERVE_LUA: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local info = redis.pcall('INFO', 'server')
local run = type(info) == 'string' and string.match(info, 'run_id:(%x+)') or nil
local ran = redis.call('GET', KEYS[5])
if run and ran ~= run then
  redis.call('SET', KEYS[5], run)
  if ran and redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('SET', KEYS[2], ARGV[6])
    redis.call('SET', KEYS[4], '1', 'PX', ARGV[7])
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[7])
  end
end
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = ARGV[6]
  redis.call('SET', KEYS[2], epoch)
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[7])
  if ARGV[5] ~= '' then redis.call('SET', KEYS[3], '1', 'PX', ARGV[7]) end
end
if epoch ~= ARGV[5] then
  if ARGV[5] ~= '' and redis.call('EXISTS', KEYS[4]) == 1
      and redis.call('EXISTS', KEYS[3]) == 0 then
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[7])
  end
  return {'epoch', epoch}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local e = redis.call('HMGET', KEYS[1], 'state', 'fp', 'reply', 'lease', 'phase', 'ref')
if e[1] == 'done' then return {'done', e[2] or '', e[3] or ''} end
if e[1] == 'held' then return {'held', e[2] or '', e[6] or ''} end
local orphan = false
if e[1] == 'inflight' then
  local lease = tonumber(e[4]) or 0
  if lease > now or e[2] ~= ARGV[1] then
    return {'inflight', e[2] or '', string.format('%d', math.max(lease - now, 0))}
  end
  if redis.call('EXISTS', KEYS[3]) == 1 then
    return {'recovering', string.format('%d', math.max(redis.call('PTTL', KEYS[3]), 1))}
  end
  if e[5] == 'delivering' then
    if ARGV[8] == 'hold' then
      redis.call('HSET', KEYS[1], 'state', 'held')
      redis.call('HDEL', KEYS[1], 'token', 'lease', 'phase')
      redis.call('PEXPIRE', KEYS[1], ARGV[4])
      return {'held', e[2] or '', e[6] or '', 'orphan'}
    end
    orphan = true
  end
elseif redis.call('EXISTS', KEYS[3]) == 1 then
  return {'recovering', string.format('%d', math.max(redis.call('PTTL', KEYS[3]), 1))}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'inflight', 'fp', ARGV[1], 'token', ARGV[2],
  'lease', string.format('%d', now + tonumber(ARGV[3])), 'phase', 'claimed')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if orphan then return {'reserved', 'orphan', e[6] or ''} end
return {'reserved'}
";

/// Lease renewal. KEYS[1]: the entry. ARGV[1]: token, ARGV[2]: lease (ms), ARGV[3]: fingerprint,
/// ARGV[4]: lead reference, ARGV[5]: phase ('claimed' or 'delivering'), ARGV[6]: entry TTL (ms).
/// An entry that vanished (Redis restarted empty) is put back. Returns 1 when renewed, 2 when
/// put back, 0 when another claim or an outcome holds the key now.
pub(super) const RENEW_LUA: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local e = redis.call('HMGET', KEYS[1], 'state', 'token')
if e[1] and (e[1] ~= 'inflight' or e[2] ~= ARGV[1]) then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'state', 'inflight', 'fp', ARGV[3], 'token', ARGV[1],
  'lease', string.format('%d', now + tonumber(ARGV[2])), 'phase', ARGV[5], 'ref', ARGV[4])
if not e[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  return 2
end
return 1
";

/// KEYS[1]: the entry. ARGV[1]: token, ARGV[2]: state ('done' or 'held'), ARGV[3]: fingerprint,
/// ARGV[4]: the reply (done) or the lead reference (held), ARGV[5]: TTL (ms). Records the
/// outcome if `token` still holds the key, or the key vanished (Redis restarted empty).
/// Returns 1 when stored, 0 when another claim or an outcome holds the key now.
pub(super) const FINISH_LUA: &str = r"
local e = redis.call('HMGET', KEYS[1], 'state', 'token')
if e[1] and (e[1] ~= 'inflight' or e[2] ~= ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
local field = 'reply'
if ARGV[2] == 'held' then field = 'ref' end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'fp', ARGV[3], field, ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
";

/// KEYS[1]: the entry. ARGV[1]: token. Deletes the entry if the token still holds it.
pub(super) const RELEASE_LUA: &str = r"
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
";

/// KEYS[1]: the epoch, KEYS[2]: the recovery marker, KEYS[3]: the young-epoch marker,
/// KEYS[4]: the run marker. ARGV as RESERVE_LUA's 5 to 7. Returns {epoch, '1' or '0'}: Redis's
/// epoch (made now if there was none), starting the recovery time as RESERVE_LUA does, and
/// whether the script could read the `run_id` ('0': `INFO` is refused to this user, e.g. an ACL
/// without `@dangerous`; a restart with data is then not noticed, and the caller says so).
///
/// The run marker holds the `run_id` of the Redis process that last ran a claim or epoch
/// script. A process that finds another id there restarted (or took over, in a failover) since:
/// it kept its data, but that data may be older than what the replicas saw — an RDB or AOF
/// snapshot lacks the last writes, a promoted replica lags — so it may hold a claim "in flight"
/// for a lead since delivered, under a lease that runs out soon. Such a Redis gets a new epoch
/// and the recovery time: every replica notices, and puts back what it knows over those stale
/// claims before keys are handed out or taken over. (No run marker next to an epoch: a store
/// written before the marker existed; it is recorded, nothing starts.)
pub(super) const EPOCH_LUA: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local info = redis.pcall('INFO', 'server')
local run = type(info) == 'string' and string.match(info, 'run_id:(%x+)') or nil
local seen = run and '1' or '0'
local ran = redis.call('GET', KEYS[4])
local epoch = redis.call('GET', KEYS[1])
if run and ran ~= run then
  redis.call('SET', KEYS[4], run)
  if ran and epoch then
    redis.call('SET', KEYS[1], ARGV[2])
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
    redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
    return {ARGV[2], seen}
  end
end
if epoch then
  if ARGV[1] ~= '' and epoch ~= ARGV[1] and redis.call('EXISTS', KEYS[3]) == 1
      and redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
  end
  return {epoch, seen}
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
if ARGV[1] ~= '' then redis.call('SET', KEYS[2], '1', 'PX', ARGV[3]) end
return {ARGV[2], seen}
";

/// Puts back outcomes a replica knows. KEYS: entries; ARGV[1]: 'over' or 'absent', then per
/// key four values (state, fp, reply or reference, TTL ms). A key Redis holds an outcome for is
/// left alone, and so is a key it holds "in flight" unless ARGV[1] is 'over': after Redis went
/// back in time (a snapshot restore) such a claim is stale, and the replica's outcome is final.
/// Returns how many were written.
pub(super) const SEED_LUA: &str = r"
local n = 0
local over = ARGV[1] == 'over'
for i, key in ipairs(KEYS) do
  local a = (i - 1) * 4 + 1
  local state = redis.call('HGET', key, 'state')
  if not state or (over and state == 'inflight') then
    redis.call('DEL', key)
    local field = 'reply'
    if ARGV[a + 1] == 'held' then field = 'ref' end
    redis.call('HSET', key, 'state', ARGV[a + 1], 'fp', ARGV[a + 2], field, ARGV[a + 3])
    redis.call('PEXPIRE', key, ARGV[a + 4])
    n = n + 1
  end
end
return n
";
