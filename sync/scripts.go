package sync

import "github.com/redis/go-redis/v9"

// The Lua scripts. Each is sent with EVALSHA and, only after a NOSCRIPT
// reply, with EVAL. Every script follows two rules:
//
//   - Everything that can fail (argument checks, reads of stored values,
//     type checks) happens before the first write, and no write can fail
//     after the first one; so an error reply always means nothing was
//     written (addScript, which applies many items, answers so per item).
//   - Every write of a key is followed, in the same script, by PEXPIRE of
//     that key: no key is ever left without a TTL. (addScript's counters:
//     the write that creates one; see there.)
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

// addScript adds the deltas of a batch of items, each one node's delta to
// the counter of one window or bucket, and reads back the totals of it and
// of the Span counters before it. A counter is a hash holding each node's
// contribution apart and their sum, so a node heals only its own share: a
// counter the store lost (restarted empty, evicted) is brought back to the
// sum of what every node sent once each has flushed again, not to the
// largest one node's share. The items run in order, each as the one-item
// script would: the batch is one atomic step, and only the store's round
// trip and script call are shared.
//
//	KEYS       each item's keys in turn: its counter of id, then the
//	           counters of id-1, id-2, ... (Span of them); each a hash
//	           {t = total, n:<node> = units node sent, q:<node> = seq}
//	ARGV       six per item, in turn:
//	  1        count of the item's keys, 1 + Span
//	  2        delta >= 0: 0 writes nothing (unless floor heals)
//	  3        TTL in milliseconds >= 1, set by the write that creates the
//	           counter (see below)
//	  4        floor >= 0: node's share is raised to at least floor after
//	           delta is added, and the total by as much
//	  5        node: the writer's id (any string, at most 64 bytes)
//	  6        seq >= 0: if positive, delta is added only if the counter's
//	           q:<node> (the highest seq of node whose delta it added) is
//	           below seq, and q:<node> is then set to seq; so a write sent
//	           twice adds its delta once (floor applies either way)
//	returns    per item {total(id-span), ..., total(id-1), total(id)},
//	           oldest first, or an error reply if one of its counters holds
//	           something else than a counter (the store's own WRONGTYPE, or
//	           ours): that item writes nothing, the others run
//
// Every argument is checked before the first write (bad arguments: an error
// reply for the whole batch, nothing written); reads go through pcall, so a
// key of another type is that item's error; no write can fail after the
// first one (Redis denies a script's writes for memory only up to its
// first).
//
// The write that creates a counter (no total yet) sets its TTL in the same
// step, so no counter is ever without one; later writes keep it (HSET keeps
// a key's TTL) rather than pay a PEXPIRE each. That loses nothing: every
// writer sends the TTL that ends the counter one bucket and a second after
// the bucket stops counting, measured from its write, so each write would
// set about the same instant again (nodes whose clocks differ by more than
// a bucket and a second disagree on which buckets count anyway).
var addScript = redis.NewScript(luaLib + `
-- num decodes an argument: an integer in [lo, hi], or nil. Cheaper than
-- arg, which a stored value needs (it refuses "1e3"); an argument written
-- so means the same number.
local function num(v, lo, hi)
  local x = tonumber(v)
  if not x or x ~= math.floor(x) or x < lo or x > hi then return nil end
  return x
end

local items, used = {}, 0
if #ARGV == 0 or #ARGV % 6 ~= 0 then return badargs() end
for i = 1, #ARGV / 6 do
  local b = 6 * (i - 1)
  local it = {k = used, n = num(ARGV[b + 1], 1, 65537), delta = num(ARGV[b + 2], 0, 4294967295),
    px = num(ARGV[b + 3], 1, 1e15), floor = num(ARGV[b + 4], 0, 4503599627370495),
    node = ARGV[b + 5], seq = num(ARGV[b + 6], 0, 4503599627370495)}
  if not it.n or not it.delta or not it.px or not it.floor or #it.node > 64 or not it.seq then return badargs() end
  used = used + it.n
  items[i] = it
end
if used ~= #KEYS then return badargs() end

-- read returns the integer v holds (0 if absent), or nil if it is not a
-- non-negative integer.
local function read(v)
  local x = int(v)
  if x == false or (x and x < 0) then return nil end
  return x or 0
end

-- add applies item it; a read the store refused (a key of another type:
-- WRONGTYPE) or a value not a counter's ends it, with nothing written.
local function add(it)
  local k, n = it.k, it.n
  local out = {}
  for i = n, 2, -1 do
    local v = redis.pcall('HGET', KEYS[k + i], 't')
    if type(v) == 'table' then return v end
    local x = read(v)
    if not x then return corrupt(KEYS[k + i]) end
    out[n - i + 1] = x
  end
  local key = KEYS[k + 1]
  local f, q = 'n:' .. it.node, 'q:' .. it.node
  local st = redis.pcall('HMGET', key, 't', f, q)
  if st.err then return st end
  local total, mine, last = read(st[1]), read(st[2]), int(st[3])
  if not total or not mine or last == false then return corrupt(key) end
  local delta = it.delta
  if it.seq > 0 and last and last >= it.seq then delta = 0 end
  local grow = mine + delta
  if grow < it.floor then grow = it.floor end
  grow = grow - mine
  if grow > 0 then
    if total + grow >= 9007199254740992 then return corrupt(key) end
    total = total + grow
    if it.seq > 0 and delta > 0 then
      redis.call('HSET', key, f, fmt(mine + grow), 't', fmt(total), q, fmt(it.seq))
    else
      redis.call('HSET', key, f, fmt(mine + grow), 't', fmt(total))
    end
    if st[1] == false then redis.call('PEXPIRE', key, fmt(it.px)) end
  end
  out[n] = total
  return out
end

local out = {}
for i, it in ipairs(items) do out[i] = add(it) end
return out
`)

// The decision scripts of Exact decide one request against every rate of a
// key in one call: each rate's state lives in a key of its own (KEYS, one
// per rate, all under the key's hash tag, so in one Cluster slot), every
// rate is read and checked before anything is written, and the cost is then
// written to all of them or, if any rate denies, to none. They share one
// layout:
//
//	KEYS[k]    state of rate k, k = 1..R, 1 <= R <= 4
//	ARGV[1]    cost n >= 0 (0: a peek, always allowed, nothing written)
//	ARGV[2]    consume: 1 keeps an admission; anything else reports it only
//	ARGV[3]    now (us; -1: Redis TIME); one instant for every rate
//	ARGV[4..]  each rate's arguments in turn, its limit first
//	returns    {allowed, then per rate k: remaining, reset after (us),
//	           retry after (us; 0 if rate k admits n, -1 if it never can),
//	           then now (us): the instant decided at, Redis TIME or ARGV[3],
//	           then the key's reset marker: the largest field e of its
//	           rates' states (0 if none), which Exact.Reset sets,
//	           then per rate k: the birth of its state (0 if none)}
//
// Remaining and reset after are the rate's after the decision (an admitted
// cost counted even when not consumed; a denied one not at all); Go picks
// the binding rate and the latest retry.
//
// A state's birth is the field b: Redis TIME (us) when a decision script
// first wrote the state, kept by every later write (HSET keeps the other
// fields of a hash). A state the store lost and a decision created again
// has a new birth, so a process that saw the old one alive tells the loss
// (see Exact's births). A state written only by the charge scripts, or by
// a release before births, gets one at its next decision's write.

// decisionLib holds what the decision scripts share.
const decisionLib = luaLib + `
-- head checks the arguments every decision script starts with, and that
-- ARGV holds per arguments for each of the 1 to 4 keys (rates). It returns
-- the cost and whether to consume, or nil.
local function head(per)
  local n = arg(ARGV[1], 0, 1073741824)
  local R = #KEYS
  if not n or R < 1 or R > 4 or #ARGV ~= 3 + per * R then return nil end
  return n, ARGV[2] == '1'
end

-- limits reads each rate's limit and window (us), the two arguments per
-- rate of the scripts that take two (head(2) checked their count): two
-- tables, or nil if one is out of range.
local function limits()
  local lim, W = {}, {}
  for k = 1, #KEYS do
    lim[k] = arg(ARGV[2 + 2 * k], 0, 1073741823)
    W[k] = arg(ARGV[3 + 2 * k], 1, 1e15)
    if not lim[k] or not W[k] then return nil end
  end
  return lim, W
end

-- born returns the birth of a state a script creates: Redis TIME, never
-- the caller's instant, so a state created again is told apart.
local function born() return clock(-1) end
`

// windowHead starts the decision scripts whose rates take two arguments,
// limit and window: it reads n, consume, lim, W, R (the count of rates)
// and now, or returns badargs().
const windowHead = `
local n, consume = head(2)
if not n then return badargs() end
local lim, W = limits()
if not lim then return badargs() end
local R = #KEYS
local now = clock(ARGV[3])`

// fixedScript decides a request by the fixed window counter.
//
//	KEYS[k]  hash {w = window id, c = units admitted in window w, e = reset marker, b = birth}
//	ARGV     n, consume, now; per rate: limit, window (us)
//	returns  {allowed, per rate: remaining, reset (us), retry (us; -1 never), now (us), marker, per rate: birth}
var fixedScript = redis.NewScript(decisionLib + windowHead + `
-- Every rate's window and usage at now; nothing is written before all fit.
local id, used, birth, epoch = {}, {}, {}, 0
local fits = true
for k = 1, R do
  local i = fdiv(now, W[k])
  local st = redis.call('HMGET', KEYS[k], 'w', 'c', 'e', 'b')
  local sw, sc, se, sb = int(st[1]), int(st[2]), int(st[3]), int(st[4])
  if sw == false or sc == false or se == false or sb == false or (sc and sc < 0) then return corrupt(KEYS[k]) end
  if se and se > epoch then epoch = se end
  birth[k] = sb
  local u = 0
  if sw and sc and sw >= i then
    -- w > i only if the server clock stepped back: keep counting its units.
    u, i = sc, sw
  end
  id[k], used[k] = i, u
  if n > lim[k] or u + n > lim[k] then fits = false end
end
local allowed = 0
if n == 0 or fits then allowed = 1 end
local out = {allowed}
for k = 1, R do
  -- After a step back the counted window ends more than W from now: reset
  -- and retry say when it really ends, so a client retrying then is admitted.
  local reset = (id[k] + 1) * W[k] - now
  local retry = 0
  if allowed == 1 and n > 0 then
    used[k] = used[k] + n
    if consume then
      if birth[k] then
        redis.call('HSET', KEYS[k], 'w', fmt(id[k]), 'c', fmt(used[k]))
      else
        birth[k] = born()
        redis.call('HSET', KEYS[k], 'w', fmt(id[k]), 'c', fmt(used[k]), 'b', fmt(birth[k]))
      end
      redis.call('PEXPIRE', KEYS[k], fmt(ttl(reset)))
    end
  elseif n > lim[k] then
    retry = -1
  elseif used[k] + n > lim[k] then
    retry = reset
  end
  local rem = lim[k] - used[k]
  if rem < 0 then rem = 0 end
  out[3 * k - 1], out[3 * k], out[3 * k + 1] = rem, reset, retry
end
out[3 * R + 2] = now
out[3 * R + 3] = epoch
for k = 1, R do out[3 * R + 3 + k] = birth[k] or 0 end
return out
`)

// counterScript decides a request by the sliding window counter (the
// weighted estimate of NewSlidingCounter): each rate's window of nb buckets of G microseconds; the
// bucket that straddles now - W counts by its remaining overlap, rounded
// up.
//
//	KEYS[k]  hash {bucket id = units admitted in it, e = reset marker, b = birth}
//	ARGV     n, consume, now; per rate: limit, G (us), nb
//	returns  {allowed, per rate: remaining, reset (us), retry (us; -1 never), now (us), marker, per rate: birth}
var counterScript = redis.NewScript(decisionLib + `
local n, consume = head(3)
if not n then return badargs() end
local R = #KEYS
local lim, G, nb = {}, {}, {}
for k = 1, R do
  lim[k] = arg(ARGV[1 + 3 * k], 0, 1073741823)
  G[k] = arg(ARGV[2 + 3 * k], 1, 1e15)
  nb[k] = arg(ARGV[3 + 3 * k], 1, 65536)
  if not lim[k] or not G[k] or not nb[k] then return badargs() end
end
local now = clock(ARGV[3])

-- load reads rate k's buckets at now: the bucket j of now, the counts cnt
-- by bucket id, the units of the buckets that count in full (full) and of
-- the one that straddles the window's start (strad), the weighted
-- estimate est, the oldest non-empty and the newest bucket ids, and the
-- fields of buckets that no longer count (stale). nil if a field is not a
-- bucket's count.
local function load(k)
  local g, m = G[k], nb[k]
  local j = fdiv(now, g)
  local s = {j = j, cnt = {}, full = 0, strad = 0, stale = {}, epoch = 0}
  local h = redis.call('HGETALL', KEYS[k])
  for i = 1, #h, 2 do
    local id, c = int(h[i]), int(h[i + 1])
    if h[i] == 'e' or h[i] == 'b' then
      -- the reset marker (Exact.Reset) or the birth, not a bucket
      if not c or c < 0 then return nil end
      if h[i] == 'e' then s.epoch = c else s.birth = c end
    elseif not id or not c or c < 0 or c > 2147483647 then
      return nil
    elseif id < j - m then
      s.stale[#s.stale + 1] = h[i]
    else
      s.cnt[id] = c
      -- buckets after j exist only if the server clock stepped back: they
      -- count in full until they leave the window.
      if id == j - m then s.strad = c else s.full = s.full + c end
      if c > 0 and (not s.oldest or id < s.oldest) then s.oldest = id end
      if not s.newest or id > s.newest then s.newest = id end
    end
  end
  s.est = s.full
  if s.strad > 0 then
    local q, r = muldiv(s.strad, g - (now - j * g), g)
    if r > 0 then q = q + 1 end
    s.est = s.est + q
  end
  return s
end

-- admitAt returns the earliest instant >= now at which n units fit rate k
-- (state s), walking forward bucket by bucket: in bucket j+i the
-- straddler is bucket j+i-nb and no units arrive after bucket j.
local function admitAt(s, k)
  local g, m, l = G[k], nb[k], lim[k]
  local st, f = s.strad, s.full
  for i = 0, m + 1 do
    if i > 0 then
      st = 0
      if i <= m then st = s.cnt[s.j + i - m] or 0 end
      f = f - st
    end
    local room = l - n - f
    if room >= 0 then
      local at = 0
      if st > room then
        local q, r = muldiv(st - room, g, st)
        if r > 0 then q = q + 1 end
        at = q
      end
      if at < g then
        local t = (s.j + i) * g + at
        if t < now then t = now end
        return t
      end
    end
  end
  return ((s.newest or s.j) + m + 1) * g
end

-- Every rate's estimate at now; nothing is written before all fit.
local st = {}
local fits, epoch = true, 0
for k = 1, R do
  st[k] = load(k)
  if not st[k] then return corrupt(KEYS[k]) end
  if st[k].epoch > epoch then epoch = st[k].epoch end
  if n > lim[k] or st[k].est + n > lim[k] then fits = false end
end
local allowed = 0
if n == 0 or fits then allowed = 1 end
local out = {allowed}
for k = 1, R do
  local s, g, m = st[k], G[k], nb[k]
  local retry = 0
  if allowed == 1 and n > 0 then
    s.est = s.est + n
    if consume then
      redis.call('HINCRBY', KEYS[k], fmt(s.j), n)
      if not s.birth then
        s.birth = born()
        redis.call('HSET', KEYS[k], 'b', fmt(s.birth))
      end
      for i = 1, #s.stale, 500 do
        redis.call('HDEL', KEYS[k], unpack(s.stale, i, math.min(i + 499, #s.stale)))
      end
      local top = s.j
      if s.newest and s.newest > top then top = s.newest end
      redis.call('PEXPIRE', KEYS[k], fmt(ttl((top + m + 1) * g - now)))
      if not s.oldest or s.j < s.oldest then s.oldest = s.j end
    end
  elseif n > lim[k] then
    retry = -1
  elseif s.est + n > lim[k] then
    retry = admitAt(s, k) - now
  end
  local rem = lim[k] - s.est
  if rem < 0 then rem = 0 end
  out[3 * k - 1], out[3 * k], out[3 * k + 1] = rem, ((s.oldest or s.j) + m + 1) * g - now, retry
end
out[3 * R + 2] = now
out[3 * R + 3] = epoch
for k = 1, R do out[3 * R + 3 + k] = st[k].birth or 0 end
return out
`)

// gcraScript decides a request by GCRA: for each rate a token bucket of
// capacity limit refilled at limit units per window. The theoretical
// arrival time is t + r/l microseconds, l the limit the state is encoded
// for, so the emission interval W/l is exact.
//
//	KEYS[k]  hash {t = TAT (us), r = fraction in 1/l us, l = limit, e = reset marker, b = birth}
//	ARGV     n, consume, now; per rate: limit, window (us)
//	returns  {allowed, per rate: remaining, reset (us), retry (us; -1 never), now (us), marker, per rate: birth}
var gcraScript = redis.NewScript(decisionLib + windowHead + `
-- Every rate's TAT at now, and after n more units if they fit; nothing is
-- written before all fit.
local tat, rem, ntat, nrem, fit, birth = {}, {}, {}, {}, {}, {}
local fits, epoch = true, 0
for k = 1, R do
  local l, w = lim[k], W[k]
  local st = redis.call('HMGET', KEYS[k], 't', 'r', 'l', 'e', 'b')
  local t, r, old, se, sb = int(st[1]), int(st[2]), int(st[3]), int(st[4]), int(st[5])
  if t == false or r == false or old == false or se == false or sb == false or (se and se < 0) then return corrupt(KEYS[k]) end
  if se and se > epoch then epoch = se end
  birth[k] = sb
  if not t or not r or not old or old < 1 then
    t, r, old = now, 0, math.max(l, 1)
  end
  if r < 0 or r >= old or t > now + 4 * w + 1125899906842624 then return corrupt(KEYS[k]) end
  if t < now or (t == now and r == 0) then
    t, r = now, 0
  end
  if l > 0 and old ~= l then
    -- Keep the usage, D*old/W units for debt D = TAT - now: the debt
    -- becomes D*old/l.
    local d = t - now
    if r == 0 and d == 0 then
      -- a full bucket: nothing to rescale
    elseif d * old / l > 1125899906842624 then
      t, r = now + 1125899906842624, 0
    else
      local q, rr = muldiv(old, d, l)
      rr = rr + r
      local c = fdiv(rr, l)
      t, r = now + q + c, rr - c * l
    end
  end
  tat[k], rem[k], fit[k] = t, r, n == 0
  if n > 0 and n <= l then
    local q, rr = muldiv(n, w, l)
    local nt, nr = t + q, r + rr
    if nr >= l then nr = nr - l; nt = nt + 1 end
    local d = nt - now
    ntat[k], nrem[k], fit[k] = nt, nr, d < w or (d == w and nr == 0)
  end
  if not fit[k] then fits = false end
end
local allowed = 0
if fits then allowed = 1 end
local out = {allowed}
for k = 1, R do
  local l, w = lim[k], W[k]
  local retry = 0
  if allowed == 1 and n > 0 then
    tat[k], rem[k] = ntat[k], nrem[k]
    if consume then
      if birth[k] then
        redis.call('HSET', KEYS[k], 't', fmt(tat[k]), 'r', fmt(rem[k]), 'l', fmt(l))
      else
        birth[k] = born()
        redis.call('HSET', KEYS[k], 't', fmt(tat[k]), 'r', fmt(rem[k]), 'l', fmt(l), 'b', fmt(birth[k]))
      end
      redis.call('PEXPIRE', KEYS[k], fmt(ttl(tat[k] - now + 1)))
    end
  elseif n > l then
    retry = -1
  elseif not fit[k] then
    local at = ntat[k] - w
    if nrem[k] > 0 then at = at + 1 end
    retry = at - now
  end
  local d = tat[k] - now
  local remaining = 0
  if l > 0 and d < w then
    local q, r = muldiv(l, w - d, w)
    remaining = q + fdiv(r - rem[k], w)
    if remaining < 0 then remaining = 0 end
  end
  local reset = d
  if rem[k] > 0 then reset = reset + 1 end
  out[3 * k - 1], out[3 * k], out[3 * k + 1] = remaining, reset, retry
end
out[3 * R + 2] = now
out[3 * R + 3] = epoch
for k = 1, R do out[3 * R + 3 + k] = birth[k] or 0 end
return out
`)
