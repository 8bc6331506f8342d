package sync

import (
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
)

// The charge scripts of Exact add units to every rate of a key at a given
// instant, unconditionally: an overdraft, never refused, so a rate's count
// may pass its limit and the decisions after it deny. Exact sends them to
// give the store the units this process admitted without it (its failure
// policy, while the store was unreachable, evicting or answering wrongly)
// and, after the store lost state, the units the store had granted it (see
// Exact's journal). A negative count is a refund: it takes units off, never
// below zero. They follow the two rules of every script (see above) and
// share one layout:
//
//	KEYS[k]    state of rate k, k = 1..R, 1 <= R <= 4 (the decision
//	           script's keys)
//	ARGV[1]    n in [-2^30, 2^30]: units to add (negative: to take off)
//	ARGV[2]    at (us >= 0): the instant the units belong to; -1: now
//	ARGV[3]    now (us; -1: Redis TIME)
//	ARGV[4..]  each rate's arguments as the decision script takes them,
//	           its limit first
//	returns    the count of rates whose state was written
//
// Units of an instant whose window (bucket, for the sliding counter) no
// longer counts at now change nothing.

// chargeHead reads n, at, R and now of a charge script whose rates take
// per arguments each, or returns badargs().
const chargeHead = `
local n = arg(ARGV[1], -1073741824, 1073741824)
local at = arg(ARGV[2], -1, 4503599627370495)
local R = #KEYS
if not n or not at or R < 1 or R > 4 or #ARGV ~= 3 + %d * R then return badargs() end
local now = clock(ARGV[3])
if at < 0 then at = now end
local cap = 1125899906842624`

// fixedChargeScript charges a fixed window counter: the window of at, only
// while it is the current one at now (or, after a server clock step back,
// the stored one): the stored count of that window changes by n (never
// below zero), and a current window not stored yet starts with n > 0.
//
//	KEYS[k]  hash {w = window id, c = units admitted in window w}
//	ARGV     n, at, now; per rate: limit, window (us)
var fixedChargeScript = redis.NewScript(decisionLib + fmt.Sprintf(chargeHead, 2) + `
local lim, W = limits()
if not lim then return badargs() end
local wid, cnt = {}, {}
for k = 1, R do
  local i, cur = fdiv(at, W[k]), fdiv(now, W[k])
  local st = redis.call('HMGET', KEYS[k], 'w', 'c')
  local sw, sc = int(st[1]), int(st[2])
  if sw == false or sc == false or (sc and sc < 0) then return corrupt(KEYS[k]) end
  if i >= cur then
    if sw and sc and sw == i then
      local c = sc + n
      if c < 0 then c = 0 elseif c > cap then c = cap end
      if c ~= sc then wid[k], cnt[k] = i, c end
    elseif n > 0 and (not sw or not sc or sw < i) then
      wid[k], cnt[k] = i, n
    end
  end
end
local wrote = 0
for k = 1, R do
  if wid[k] then
    redis.call('HSET', KEYS[k], 'w', fmt(wid[k]), 'c', fmt(cnt[k]))
    redis.call('PEXPIRE', KEYS[k], fmt(ttl((wid[k] + 1) * W[k] - now)))
    wrote = wrote + 1
  end
end
return wrote
`)

// counterChargeScript charges a sliding window counter: the bucket of at,
// while it still counts at now, changes by n (never below zero, never
// above 2^31-1, the decision script's bound of a bucket).
//
//	KEYS[k]  hash {bucket id = units admitted in it}
//	ARGV     n, at, now; per rate: limit, G (us), nb
var counterChargeScript = redis.NewScript(decisionLib + fmt.Sprintf(chargeHead, 3) + `
local G, nb = {}, {}
for k = 1, R do
  G[k] = arg(ARGV[2 + 3 * k], 1, 1e15)
  nb[k] = arg(ARGV[3 + 3 * k], 1, 65536)
  if not arg(ARGV[1 + 3 * k], 0, 1073741823) or not G[k] or not nb[k] then return badargs() end
end
local bid, cnt, px = {}, {}, {}
for k = 1, R do
  local j, cur = fdiv(at, G[k]), fdiv(now, G[k])
  if j >= cur - nb[k] then
    local f = fmt(j)
    local c = int(redis.call('HGET', KEYS[k], f))
    if c == false or (c and (c < 0 or c > 2147483647)) then return corrupt(KEYS[k]) end
    c = c or 0
    local nc = c + n
    if nc < 0 then nc = 0 elseif nc > 2147483647 then nc = 2147483647 end
    if nc ~= c then
      local top = j
      if cur > top then top = cur end
      local p = ttl((top + nb[k] + 1) * G[k] - now)
      local old = redis.call('PTTL', KEYS[k])
      if old > p then p = old end
      bid[k], cnt[k], px[k] = f, nc, p
    end
  end
end
local wrote = 0
for k = 1, R do
  if bid[k] then
    if cnt[k] == 0 then
      redis.call('HDEL', KEYS[k], bid[k])
    else
      redis.call('HSET', KEYS[k], bid[k], fmt(cnt[k]))
    end
    redis.call('PEXPIRE', KEYS[k], fmt(px[k]))
    wrote = wrote + 1
  end
end
return wrote
`)

// gcraChargeScript charges GCRA: n > 0 units at at move the theoretical
// arrival time to max(TAT, at) + n*W/l; a refund (n < 0) takes n*W/l off
// it, never below max(now, at). l is the limit the state is encoded for
// (the rate's limit for a new state), so the units keep their meaning
// when the decision script rescales it. The TAT never passes now + 4W: a
// debt of four windows denies as long as any the journal can hold.
//
//	KEYS[k]  hash {t = TAT (us), r = fraction in 1/l us, l = limit}
//	ARGV     n, at, now; per rate: limit, window (us)
var gcraChargeScript = redis.NewScript(decisionLib + fmt.Sprintf(chargeHead, 2) + `
local lim, W = limits()
if not lim then return badargs() end
local nt, nr, nl = {}, {}, {}
for k = 1, R do
  local w = W[k]
  local st = redis.call('HMGET', KEYS[k], 't', 'r', 'l')
  local t, r, old = int(st[1]), int(st[2]), int(st[3])
  if t == false or r == false or old == false then return corrupt(KEYS[k]) end
  local fresh = not t or not r or not old or old < 1
  if fresh then
    t, r, old = at, 0, math.max(lim[k], 1)
  elseif r < 0 or r >= old or t > now + 4 * w + cap then
    return corrupt(KEYS[k])
  end
  local t0, r0 = t, r
  if n > 0 then
    -- From the later of the stored TAT (even if past) and at: units whose
    -- debt has drained by now change nothing.
    if at > t then t, r = at, 0 end
    local q, rr = muldiv(n, w, old)
    t, r = t + q, r + rr
    if r >= old then r = r - old; t = t + 1 end
    if t > now + 4 * w then t, r = now + 4 * w, 0 end
    if t > now or (t == now and r > 0) then
      nt[k], nr[k], nl[k] = t, r, old
    end
  elseif n < 0 and not fresh and (t > now or (t == now and r > 0)) then
    local q, rr = muldiv(-n, w, old)
    t, r = t - q, r - rr
    if r < 0 then r = r + old; t = t - 1 end
    local floor = now
    if at > floor then floor = at end
    if t < floor then t, r = floor, 0 end
    if t < t0 or (t == t0 and r < r0) then
      nt[k], nr[k], nl[k] = t, r, old
    end
  end
end
local wrote = 0
for k = 1, R do
  if nt[k] then
    redis.call('HSET', KEYS[k], 't', fmt(nt[k]), 'r', fmt(nr[k]), 'l', fmt(nl[k]))
    redis.call('PEXPIRE', KEYS[k], fmt(ttl(nt[k] - now + 1)))
    wrote = wrote + 1
  end
end
return wrote
`)

// chargeScriptFor returns the charge script of algorithm alg, which
// scriptFor accepted.
func chargeScriptFor(alg shardlimit.Algorithm) *redis.Script {
	switch alg {
	case shardlimit.SlidingCounter:
		return counterChargeScript
	case shardlimit.GCRA:
		return gcraChargeScript
	}
	return fixedChargeScript
}

// resetScript forgets a key's usage in every rate (Exact.Reset) and leaves
// a reset marker in each rate's state: the field e, an instant in
// microseconds (Redis TIME, or above any marker the key held if that is
// later), which the decision scripts return. A process whose journal holds units of the key tells by it that
// a reply counting fewer units follows a Reset (by any process), not a
// loss, and does not send them back.
//
//	KEYS[k]  state of rate k, k = 1..R, 1 <= R <= 4 (any type: replaced)
//	ARGV[1]  TTL of the marker in milliseconds >= 1
//	returns  the marker
var resetScript = redis.NewScript(luaLib + `
local px = arg(ARGV[1], 1, 1e15)
local R = #KEYS
if not px or R < 1 or R > 4 then return badargs() end
local e = clock(-1)
for k = 1, R do
  if redis.call('TYPE', KEYS[k]).ok == 'hash' then
    local old = int(redis.call('HGET', KEYS[k], 'e'))
    if old and old >= e then e = old + 1 end
  end
end
for k = 1, R do
  redis.call('DEL', KEYS[k])
  redis.call('HSET', KEYS[k], 'e', fmt(e))
  redis.call('PEXPIRE', KEYS[k], fmt(px))
end
return e
`)
