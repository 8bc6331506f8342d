package sync

import "github.com/redis/go-redis/v9"

// The Lua scripts. Each is sent with EVALSHA and, only after a NOSCRIPT
// reply, with EVAL. Every script follows two rules:
//
//   - Everything that can fail (argument checks, reads of stored values,
//     type checks) happens before the first write, and no write can fail
//     after the first one; so an error reply always means nothing was
//     written.
//   - Every write of a key is followed, in the same script, by PEXPIRE of
//     that key: no key is ever left without a TTL.
//
// Redis runs Lua 5.1, whose numbers are doubles: integers are exact below
// 2^53. Instants are microseconds (about 1.7e15 today, Redis TIME's
// resolution) and every product that could pass 2^53 (a count times a
// duration) goes through muldiv, which never forms it. Numbers written to
// Redis are formatted with %.0f, because Lua's default format has only 14
// significant digits.

// luaLib holds the helpers shared by the scripts.
const luaLib = `
local function fmt(x) return string.format('%.0f', x) end

-- int decodes a stored integer: nil if absent, false if not an integer.
-- Values of 2^53 or more are refused: Lua could not hold them exactly.
local function int(v)
  if not v then return nil end
  if type(v) ~= 'string' or #v > 17 or not string.match(v, '^%-?%d+$') then return false end
  local x = tonumber(v)
  if x >= 9007199254740992 or x <= -9007199254740992 then return false end
  return x
end

-- arg decodes an integer argument in [lo, hi], or nil.
local function arg(v, lo, hi)
  local x = int(v)
  if not x or x < lo or x > hi then return nil end
  return x
end

-- fdiv returns floor(a / b) for integers |a| < 2^53, 0 < b < 2^53.
local function fdiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  return q
end

-- muldiv returns q, r with a*b = q*d + r and 0 <= r < d, for integers
-- 0 <= a < 2^31, 0 <= b < 2^53, 0 < d < 2^51 whose q is below 2^53. It
-- reduces b modulo d and multiplies by a bit by bit, so no intermediate
-- value reaches 2^53.
local function muldiv(a, b, d)
  local bq = fdiv(b, d)
  local br = b - bq * d
  local q, r = a * bq, 0
  local bit = 1073741824
  local qr, x = 0, a
  while bit >= 1 do
    qr = qr * 2
    r = r * 2
    if r >= d then qr = qr + 1; r = r - d end
    if x >= bit then
      x = x - bit
      r = r + br
      if r >= d then qr = qr + 1; r = r - d end
    end
    bit = bit / 2
  end
  return q + qr, r
end

-- clock returns the instant to decide at, in Unix microseconds: the
-- argument if it is an instant, else the Redis server's TIME.
local function clock(v)
  local now = arg(v, 0, 4503599627370495)
  if now then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- ttl returns the TTL in milliseconds (PEXPIRE's argument) of state that
-- stops mattering in us microseconds: rounded up, plus a second of slack,
-- so a slow round trip or a server clock a little off never expires state
-- that still counts. Late expiry is harmless: every script ignores state
-- that has stopped counting.
local function ttl(us)
  local m = math.ceil(us / 1000)
  if m < 0 then m = 0 end
  return m + 1000
end

local function corrupt(k) return redis.error_reply('ERR shardlimit: key ' .. k .. ' holds corrupt state') end
local function badargs() return redis.error_reply('ERR shardlimit: bad arguments') end
`

// addScript adds a delta to the counter of one window or bucket and reads
// back the totals of it and of the Span counters before it.
//
//	KEYS[1]    counter of id; KEYS[2..] counters of id-1, id-2, ...
//	ARGV[1]    delta >= 0: 0 writes nothing (unless Floor heals)
//	ARGV[2]    TTL in milliseconds >= 1, set on every write
//	ARGV[3]    floor >= 0: the counter is raised to at least floor
//	returns    {total(id-span), ..., total(id-1), total(id)}, oldest first
var addScript = redis.NewScript(luaLib + `
local delta = arg(ARGV[1], 0, 4294967295)
local px = arg(ARGV[2], 1, 1e15)
local floor = arg(ARGV[3], 0, 4503599627370495)
if not delta or not px or not floor then return badargs() end
local n = #KEYS
local out = {}
for i = n, 2, -1 do
  local x = int(redis.call('GET', KEYS[i]))
  if x == false or (x and x < 0) then return corrupt(KEYS[i]) end
  out[n - i + 1] = x or 0
end
local cur = int(redis.call('GET', KEYS[1]))
if cur == false or (cur and cur < 0) then return corrupt(KEYS[1]) end
cur = cur or 0
if delta > 0 or floor > cur then
  cur = cur + delta
  if cur < floor then cur = floor end
  redis.call('SET', KEYS[1], fmt(cur), 'PX', fmt(px))
end
out[n] = cur
return out
`)

// fixedScript decides a request by the fixed window counter.
//
//	KEYS[1]  hash {w = window id, c = units admitted in window w}
//	ARGV     limit, n, window (us), consume (0/1), now (us; -1: Redis TIME)
//	returns  {allowed, remaining, reset after (us), retry after (us; -1 never)}
var fixedScript = redis.NewScript(luaLib + `
local lim = arg(ARGV[1], 0, 1073741823)
local n = arg(ARGV[2], 0, 1073741824)
local W = arg(ARGV[3], 1, 1e15)
local consume = ARGV[4] == '1'
if not lim or not n or not W then return badargs() end
local now = clock(ARGV[5])
local id = fdiv(now, W)
local st = redis.call('HMGET', KEYS[1], 'w', 'c')
local sw, sc = int(st[1]), int(st[2])
if sw == false or sc == false or (sc and sc < 0) then return corrupt(KEYS[1]) end
local used = 0
if sw and sc and sw >= id then
  -- w > id only if the server clock stepped back: keep counting its units.
  used = sc
  id = sw
end
-- After such a step the counted window ends more than W from now: reset
-- and retry say when it really ends, so a client retrying then is admitted.
local stop = (id + 1) * W
local reset = stop - now
local allowed, retry = 0, 0
if n == 0 then
  allowed = 1
elseif n > lim then
  retry = -1
elseif used + n <= lim then
  allowed = 1
  used = used + n
  if consume then
    redis.call('HSET', KEYS[1], 'w', fmt(id), 'c', fmt(used))
    redis.call('PEXPIRE', KEYS[1], fmt(ttl(stop - now)))
  end
else
  retry = reset
end
local rem = lim - used
if rem < 0 then rem = 0 end
return {allowed, rem, reset, retry}
`)

// counterScript decides a request by the sliding window counter (policy S2
// of CASES.md C4): the window of nb buckets of G microseconds; the bucket
// that straddles now - W counts by its remaining overlap, rounded up.
//
//	KEYS[1]  hash {bucket id = units admitted in it}
//	ARGV     limit, n, G (us), nb, consume (0/1), now (us; -1: Redis TIME)
//	returns  {allowed, remaining, reset after (us), retry after (us; -1 never)}
var counterScript = redis.NewScript(luaLib + `
local lim = arg(ARGV[1], 0, 1073741823)
local n = arg(ARGV[2], 0, 1073741824)
local G = arg(ARGV[3], 1, 1e15)
local nb = arg(ARGV[4], 1, 65536)
local consume = ARGV[5] == '1'
if not lim or not n or not G or not nb then return badargs() end
local now = clock(ARGV[6])
local j = fdiv(now, G)
local delta = now - j * G
local h = redis.call('HGETALL', KEYS[1])
local cnt = {}
local full, strad = 0, 0
local oldest, newest
local stale = {}
for i = 1, #h, 2 do
  local id, c = int(h[i]), int(h[i + 1])
  if not id or not c or c < 0 or c > 2147483647 then return corrupt(KEYS[1]) end
  if id < j - nb then
    stale[#stale + 1] = h[i]
  else
    cnt[id] = c
    -- buckets after j exist only if the server clock stepped back: they
    -- count in full until they leave the window.
    if id == j - nb then strad = c else full = full + c end
    if c > 0 and (not oldest or id < oldest) then oldest = id end
    if not newest or id > newest then newest = id end
  end
end
local est = full
if strad > 0 then
  local q, r = muldiv(strad, G - delta, G)
  if r > 0 then q = q + 1 end
  est = est + q
end

-- admitAt returns the earliest instant >= now at which n units fit,
-- walking forward bucket by bucket: in bucket j+k the straddler is bucket
-- j+k-nb and no units arrive after bucket j.
local function admitAt()
  local s, f = strad, full
  for k = 0, nb + 1 do
    if k > 0 then
      s = 0
      if k <= nb then s = cnt[j + k - nb] or 0 end
      f = f - s
    end
    local room = lim - n - f
    if room >= 0 then
      local at = 0
      if s > room then
        local q, r = muldiv(s - room, G, s)
        if r > 0 then q = q + 1 end
        at = q
      end
      if at < G then
        local t = (j + k) * G + at
        if t < now then t = now end
        return t
      end
    end
  end
  return ((newest or j) + nb + 1) * G
end

local allowed, retry = 0, 0
if n == 0 then
  allowed = 1
elseif n > lim then
  retry = -1
elseif est + n <= lim then
  allowed = 1
  est = est + n
  if consume then
    redis.call('HINCRBY', KEYS[1], fmt(j), n)
    for i = 1, #stale, 500 do
      redis.call('HDEL', KEYS[1], unpack(stale, i, math.min(i + 499, #stale)))
    end
    local top = j
    if newest and newest > top then top = newest end
    redis.call('PEXPIRE', KEYS[1], fmt(ttl((top + nb + 1) * G - now)))
    if not oldest or j < oldest then oldest = j end
  end
else
  retry = admitAt() - now
end
local rem = lim - est
if rem < 0 then rem = 0 end
local reset = ((oldest or j) + nb + 1) * G - now
return {allowed, rem, reset, retry}
`)

// gcraScript decides a request by GCRA: a token bucket of capacity limit
// refilled at limit units per window. The theoretical arrival time is
// t + r/l microseconds, l the limit the state is encoded for, so the
// emission interval W/l is exact.
//
//	KEYS[1]  hash {t = TAT (us), r = fraction in 1/l us, l = limit}
//	ARGV     limit, n, window (us), consume (0/1), now (us; -1: Redis TIME)
//	returns  {allowed, remaining, reset after (us), retry after (us; -1 never)}
var gcraScript = redis.NewScript(luaLib + `
local lim = arg(ARGV[1], 0, 1073741823)
local n = arg(ARGV[2], 0, 1073741824)
local W = arg(ARGV[3], 1, 1e15)
local consume = ARGV[4] == '1'
if not lim or not n or not W then return badargs() end
local now = clock(ARGV[5])
local st = redis.call('HMGET', KEYS[1], 't', 'r', 'l')
local tat, rem, old = int(st[1]), int(st[2]), int(st[3])
if tat == false or rem == false or old == false then return corrupt(KEYS[1]) end
if not tat or not rem or not old or old < 1 then
  tat, rem, old = now, 0, lim
end
if rem < 0 or rem >= old or tat > now + 4 * W + 1125899906842624 then return corrupt(KEYS[1]) end
if tat < now or (tat == now and rem == 0) then
  tat, rem = now, 0
end
if lim > 0 and old ~= lim then
  -- Keep the usage, D*old/W units for debt D = TAT - now: the debt
  -- becomes D*old/lim.
  local d = tat - now
  if rem == 0 and d == 0 then
    -- a full bucket: nothing to rescale
  elseif d * old / lim > 1125899906842624 then
    tat, rem = now + 1125899906842624, 0
  else
    local q, r = muldiv(old, d, lim)
    r = r + rem
    local c = fdiv(r, lim)
    tat, rem = now + q + c, r - c * lim
  end
end
local allowed, retry = 0, 0
if n == 0 then
  allowed = 1
elseif n > lim then
  retry = -1
else
  local q, r = muldiv(n, W, lim)
  local ntat, nrem = tat + q, rem + r
  if nrem >= lim then nrem = nrem - lim; ntat = ntat + 1 end
  local d = ntat - now
  if d < W or (d == W and nrem == 0) then
    allowed = 1
    tat, rem = ntat, nrem
    if consume then
      redis.call('HSET', KEYS[1], 't', fmt(tat), 'r', fmt(rem), 'l', fmt(lim))
      redis.call('PEXPIRE', KEYS[1], fmt(ttl(tat - now + 1)))
    end
  else
    local at = ntat - W
    if nrem > 0 then at = at + 1 end
    retry = at - now
  end
end
local remaining = 0
local d = tat - now
if lim > 0 and d < W then
  local q, r = muldiv(lim, W - d, W)
  remaining = q + fdiv(r - rem, W)
  if remaining < 0 then remaining = 0 end
end
local reset = d
if rem > 0 then reset = reset + 1 end
return {allowed, remaining, reset, retry}
`)
