// Package sync shares rate limits between processes through a store every
// process can reach, Redis (go-redis v9) being the one shipped. Import it
// under another name, as its examples do:
//
//	import shardsync "github.com/shardlimit/shardlimit/sync"
//
// The package offers three things:
//
//   - Shared, a shardlimit.Limiter that decides every request in-process,
//     with no round trip, and shares its counts approximately with every
//     other process through the store: the reconciler (the store's
//     background goroutine, see below) flushes the
//     units admitted since its last flush every FlushInterval (50 ms by
//     default) and folds the cluster's totals back into the local
//     decisions (fixed window, sliding counter, sliding log), for every
//     rate of a limiter of several.
//   - Backend, the small interface through which the reconciler reaches the
//     shared store, and RedisBackend, its go-redis implementation for a
//     single node, Sentinel or Cluster. Each item of a batch is applied
//     atomically by a Lua script: increment and expiry in one step, never
//     an INCR a crash can separate from its EXPIRE, and never a counter
//     written without a TTL. One script call carries up to MaxScriptItems
//     items (any keys on one server, keys of one hash slot on a Cluster),
//     so a flush of many keys costs Redis a few calls, not one per key.
//   - Exact, a shardlimit.Limiter that decides every request by one Lua
//     script in Redis (fixed window, sliding window counter, GCRA): exact
//     cluster-wide limits at the price of one round trip per decision, with
//     a timeout and a failure policy (by default a local limiter takes over
//     while Redis is unreachable). A key Redis denied a unit until an
//     instant is denied in-process until then, with no round trip (the
//     deny cache, see Exact).
//
// # One store, one background goroutine
//
// Every limiter of this package on one go-redis client (the same client
// value; for a Shared limiter with a Backend of another kind, the same
// Backend value) shares one background goroutine, the store's hub, started
// by the first of them and stopped by the Close of the last. It does the
// work the limiters would otherwise each do on a goroutine of their own:
//
//   - It flushes the Shared limiters. Those of one FlushInterval share a
//     tick, one FlushInterval after the end of the previous tick, and all
//     of them that have something to send send it together, in pipelines
//     of at most the smallest MaxBatch among them (Shared limiters of
//     another FlushInterval tick on their own; each limiter's back-off
//     while its store fails is its own). An idle limiter (nothing decided
//     since its health interval began, no key near its limit, no failure)
//     is not visited at all, and a tick with no limiter to visit stops:
//     the first decision of one of its limiters starts it again, that
//     limiter's units flushing a FlushInterval later. Idle limiters cost
//     the hub nothing per tick, however many there are.
//   - It probes the store (PING, with each limiter's back-off) for the
//     Exact limiters whose calls stopped reaching it: one PING for all
//     whose probe is due.
//   - It reads the store's eviction state, one INFO per check for all of
//     them, every EvictionCheck (the shortest of its limiters'), and never
//     more than once per second.
//   - It measures each limiter's failure share (see State) and calls each
//     limiter's OnStateChange, in order.
//
// So the goroutines do not grow with the number of limiters (rules), and
// neither does the store's traffic while they are idle. Each limiter keeps
// its own State, counters and OnStateChange; the store's eviction state is
// the hub's, the same for all of them.
//
// # Health
//
// A limiter is Degraded, and decides by its FailurePolicy, while any of
// these holds, and Healthy otherwise:
//
//   - The store is unreachable: for Shared, FailAfter flushes in a row
//     applied nothing; for Exact, its calls kept failing with transport
//     errors for DegradeAfter (see ExactConfig). The hub probes the store
//     until it answers.
//   - The store evicts keys, or a reply proved it lost units: for Shared,
//     a flush read fewer units of the other nodes in a live window or
//     bucket than it had read before; for Exact, a decision's reply
//     counted fewer units of a key than this process had in the store
//     when the call was sent, or showed a key's state born again before
//     it could expire (see Eviction below).
//   - Its failure share is too large: more than DegradePercent (10%) of
//     its work in one HealthInterval (1 s by default, intervals aligned to
//     multiples of it) went to the failure policy, out of at least
//     MinHealthCount (20). For Exact the work is its decisions, and a
//     decision goes to the policy when its call failed, timed out or got
//     a reply that cannot be read; for Shared it is the items its flushes
//     send, and an item goes to the policy when the store did not apply it
//     (its keys were decided without the store's counts). A limiter
//     Degraded by its share becomes Healthy after a whole interval in
//     which less than RecoverPercent (5%) of its work went to the policy,
//     or none failed: a share between the two changes nothing, so the
//     state does not flap, and one failure of an idle limiter changes
//     nothing. Unlike an outage, a limiter Degraded by its share keeps
//     calling the store, so it sees the store recover. The share of the
//     last whole interval is ExactStats.PolicyShare and
//     SharedStats.PolicyShare; the change's Err wraps ErrPolicyShare and
//     the last store error, with its cause.
//
// An Exact limiter leaving an outage or eviction stays Degraded until it
// has replayed its journal to the store (see Outages).
//
// Leaving an outage or eviction starts a new interval: the failures of the
// outage do not keep a limiter that is back Degraded by its share.
//
// # Redis keys
//
// Every Redis key carries the limiter key as a Redis Cluster hash tag, so
// all data of one limiter key lives in one hash slot and no script ever
// touches keys of two slots (a flush's script call that carries several
// limiter keys for a Cluster carries keys of one slot only):
//
//	<prefix>{<key>}:sh:<id>      counter of window or bucket id (Backend, Shared)
//	<prefix>{<key>}:fw:<W>       fixed window state of the rate of window W (Exact)
//	<prefix>{<key>}:sc:<W>:<G>   sliding window counter state, buckets of G (Exact)
//	<prefix>{<key>}:gcra:<W>     GCRA state (Exact)
//
// W and G are microseconds. Exact keeps one state key per rate
// (Config.Rates), all under the key's hash tag, and decides them all in
// one script call.
//
// A key that contains '{' or '}' would change the hash tag, so it is written
// hex-encoded after a '#': <prefix>#{<hex of key>}:<suffix>. The prefix
// (default DefaultPrefix) may not contain braces.
//
// A Shared limiter of several rates (Config.Rates) keeps each rate's
// counters apart, under the same hash tag:
//
//	<prefix>{<key>}:sh:<W>:<id>   counter of window or bucket id of the rate of window W (µs)
//
// A Shared limiter of one rate keeps <prefix>{<key>}:sh:<id>, so its
// counters do not change when Limit and Window are written as one Rate.
//
// A counter is a Redis hash: field t holds the total, field n:<node> what
// each node (Item.Node; for Shared, a random id per limiter) sent, so a
// node that heals a counter the store lost restores its own share and the
// total comes back as the sum of them all (see Outages below), and field
// q:<node> the number of that node's last flush that added to it
// (Item.Seq), so a flush the client sends twice counts once (see go-redis
// client settings). A counter written by one node takes about 152 bytes of
// Redis memory (MEMORY USAGE, Redis 7.0, a short key), and each further
// node about 50 more: 200 for two nodes, 312 for four, 536 for eight
// (without the q fields: 136, 152, 200, 280; a single integer string took
// 88). Redis keeps such a small hash as a listpack up to
// hash-max-listpack-entries (512) fields; past 255 nodes per key and
// window it turns into a hash table several times larger.
//
// Upgrading: a release that changes only the flush script (its arguments,
// its cost; each version is a script of its own in Redis's cache) keeps
// these keys and fields, so old and new nodes share counts during a
// rolling upgrade. Releases that kept a counter as a string named it
// without the "sh" segment. Old and new nodes never touch each other's
// keys (no WRONGTYPE errors during a rolling upgrade), but they do not
// share counts either: while both run, each group limits by itself, and
// the new keys start empty, so every key's count restarts at the upgrade.
//
// Exact's states now hold their birth (a field b, see Eviction). Releases
// before it keep the field of a fixed window or GCRA state, and a state
// they created gets one at the next write of this release. A sliding
// counter state holding it is corrupt to those releases (their script
// refuses any field that is not a bucket): upgrade every process of a
// sliding counter Exact limiter together, or give the new release
// another Prefix.
//
// # go-redis client settings
//
// go-redis re-sends a command or pipeline whose reply was lost to a
// connection error or a read timeout (Options.MaxRetries, default 3; a
// ClusterClient also follows MOVED and ASK redirects and retries on network
// errors whatever MaxRetries says). Shared's flushes are safe to re-send:
// every item carries its flush's number (Item.Seq), and the store adds an
// item's units only if it has not added those of that flush or a later
// one of the same node, so a re-sent flush counts once; a RedisBackend on a
// client that re-sends also reports a dial error as MaybeApplied (the
// refused dial may be a re-send's), so those units are healed by the next
// flush's floor rather than sent again. Shared therefore works with any
// MaxRetries and with a ClusterClient. Exact's decisions are not: a
// re-sent decision script consumes twice, so give Exact a client with
// MaxRetries: -1. A ClusterClient's MOVED and ASK redirects of a decision
// are safe (the script did not run where it was refused), but it also
// re-sends after a network error, up to MaxRedirects times whatever
// MaxRetries says: on a Cluster, an Exact decision whose connection broke
// after Redis ran it may count twice.
//
// go-redis applies a context's deadline to socket reads and writes only with
// ContextTimeoutEnabled: true (the default ignores it and waits up to
// ReadTimeout, 3 s). This package never waits past its own deadlines either
// way (a call still running at its deadline is abandoned and reported), but
// only with ContextTimeoutEnabled does the abandoned command also end there
// and free its connection.
//
// go-redis dials a refused connection five times, 100 ms apart, before it
// reports the error (Options.DialerRetries, default 5): a flush or decision
// whose deadline passes meanwhile sees a timeout, which proves nothing, so
// its units are MaybeApplied instead of retried. DialerRetries: 1 reports a
// refused connection at once.
//
// go-redis allocates what a reply's headers declare before it reads the
// reply: a store answering *2147483647 makes it allocate 32 GiB. Dial
// through LimitReplies to bound every reply.
//
// Recommended client options therefore are MaxRetries: -1 (needed for
// Exact; for Shared it only saves re-sends that would change nothing),
// ContextTimeoutEnabled: true, DialerRetries: 1 and a Dialer from
// LimitReplies:
//
//	opt := &redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1}
//	opt.Dialer = shardsync.LimitReplies(redis.NewDialer(opt), 0)
//	client := redis.NewClient(opt)
//
// # Eviction
//
// Redis deletes keys before their time only when it has a maxmemory and a
// maxmemory-policy other than noeviction. An evicted counter or state is a
// fresh budget for every node that has not read it: against a Redis of
// 2 MB with allkeys-lru flooded with other keys, two Exact processes
// admitted 10 times a fixed-window limit per window (every request
// offered), and two Shared processes twice the limit before a Shared node
// kept the units it had read (see below; now at most 1.1 times with
// FallbackLimit L/2). The volatile-* policies are no refuge: every key of
// this package has a TTL, so they are evicted first.
//
// The safe policy is noeviction (with a Redis of the limiters' own, or a
// maxmemory the data never reaches). A full Redis under noeviction refuses
// writes with OOM instead (ErrRejected): Shared then decides with its local
// counts and its floors restore the store's counters once writes work
// again; Exact decides by its FailurePolicy; every count already written
// stays. Both stay within the outage bound.
//
// The store's background goroutine (see above) reads INFO when its first
// limiter starts and every EvictionCheck (2 s, never less than 1 s) after,
// once for all of the store's limiters: the policy and maxmemory
// (Stats.Eviction, and Eviction.Safe), and the growth of evicted_keys.
// While it grows the limiter is Degraded, with an error wrapping
// ErrEvicting, and decides by its FailurePolicy as during an outage: Exact
// by its local fallback, which has recorded what this process admitted
// through Redis, and when the evictions stop it sends Redis every unit of
// its journal before it decides by Redis again; Shared by its local counts
// (under FallbackLimit if set). See Outages for the bounds. It becomes
// Healthy again at the first check that finds no new eviction. Evictions
// are not traced to keys: those of other applications' keys count too, as
// they show that this package's can go next. A Redis that refuses INFO
// (some managed services) is reported once in Eviction.Err and not watched.
//
// A Shared limiter does not wait for INFO when its own counters show the
// loss. The other nodes' units of a live window or bucket only grow, so a
// node keeps the most it has read of them: a counter the store lost and
// answers short is not a fresh budget for a node that had read it (the
// nodes that sent the units restore their shares at their next flush of
// the key). And a flush that reads fewer such units than the node had read
// is proof that the store lost them: the limiter counts them
// (SharedStats.LostUnits, Losses: reads that found a loss, so one loss
// read at every flush until it is healed counts at each) and turns
// Degraded at once, with an error wrapping ErrEvicting, for an
// EvictionCheck (DefaultEvictionCheck if eviction is not watched) after
// the last such read. That is usually the first flush of a key after its
// counter was lost, one FlushInterval, where INFO takes up to an
// EvictionCheck; it also covers a store restarted empty or failed over
// before replicating, and a store whose INFO is not readable. Only units
// a node had read count: a counter lost before any node read the others'
// units in it is noticed by INFO alone. (Should units of a live bucket
// ever be taken back, a refund of another node would show only when its
// bucket rolls: the strict side.)
//
// An Exact limiter proves a loss from its own units. Its journal holds the
// units the store granted this process, with the store's instant of each;
// before each call it copies what the journal knew the store held of the
// key (grants whose replies had come back, units replayed, less refunds),
// so a grant whose reply crosses the call is never expected in its
// reply. A reply that counts fewer of them (fixed window: in the current
// window; sliding counter: in the buckets that count in full; GCRA: the
// units granted since an instant s, less those the bucket refilled since
// s, one unit of slack for its rounding) proves the store lost them: the
// limiter counts them (ExactStats.LostUnits, Losses), decides this and
// every call by its FailurePolicy, Degraded with an error wrapping
// ErrEvicting, for two EvictionChecks (the most the check takes to see
// evictions that go on) after the last such reply, and then sends the
// store every unit of its journal before the store decides again. A
// grant the store made from the lost state is kept in the store and in
// the journal (the strict side). Exact.Reset, by any process, leaves a
// marker in the key's state (a hash field e: an instant, Redis TIME) that
// every reply returns: a process reading a marker newer than its journal's
// forgets the units of the key its journal held instead of sending them
// back, so a Reset is never taken for a loss nor undone.
//
// An Exact limiter also proves the loss of a state it had no units in.
// Every state records its birth (a hash field b: Redis TIME when a
// decision first wrote it; every later write keeps it) and every reply
// returns each rate's. Per key, the process remembers the births its last
// reply showed and until when each state must live: while it counts
// units, up to the instant its reply's reset names (fixed window: the
// window's end; sliding counter: when the oldest counted bucket leaves
// the window; GCRA: the theoretical arrival time), which its TTL passes by
// a second. A later reply, decided before that instant, that shows the
// state with another birth or none, and no newer Reset marker, proves the
// store lost it, whoever had units in it: the same handling as above
// (Losses counts it; LostUnits only the process's own units). So the
// first call of any process that had seen the state alive, granted or
// denied, proves the loss; a state that expired, or a key's first state,
// proves nothing. Calls of the process in flight when a reply proves a
// loss (of either kind) cross it: the policy decides them too, as the
// store that decided them may have lost state. A replay of the whole journal (see Outages) forgets the
// births seen before it, so the states born after are not taken for the
// same loss again. The births are held for at most JournalKeys keys, only
// those whose state must still live; a key past that is not remembered,
// and its loss is proved by the journal alone, or seen by INFO. Births are
// compared in the store's instants. A refund (Settle) moves a GCRA
// state's TAT, and its TTL, back: the process that refunds forgets what it
// saw of the key, but a refund of another process that takes more than a
// second off the state's life may make it expire before the instant this
// process remembered, and its new birth is then taken for a loss
// (Degraded for a while, the strict side). A failover to a replica that
// holds an older copy of a state (same birth, fewer units) is proved only
// by the journal.
//
// # Outages
//
// A Shared limiter keeps deciding while the store is away. Take N nodes,
// each offered at most R units/s of a key, a limit L per window,
// FallbackLimit F per node (Policy FallbackLocal), flush interval T, a
// flush's round trip d and D = 2*(T + d), the lag of the healthy bound
// (see Shared). A window that an outage overlaps (an unreachable store, a
// store restarted empty or failed over before replicating, evicted keys)
// admits at most
//
//	max(L, N*F) + N*N*R*(D + Δ) + N*R*D
//
// and never more than N*L, where Δ is how long the outage lasts before
// every node is Degraded: for an unreachable store at most FailAfter
// flushes, each at most T plus FlushTimeout; for evictions (and a store
// that came back empty) one flush, T + d, for a node that reads a counter
// short of the other nodes' units it had read in it (see Eviction: a node
// that decides the key, or keeps reading it near its limit, does so at its
// first flush after the loss), and at most EvictionCheck plus one flush
// for a node that sees no such loss and waits for INFO. With F = L/N that
// is L plus what the nodes admit, unseen by each other, while they notice
// the outage and while they heal from it. For example two nodes, L = 20
// per 10 s, F = 10, R = 5/s, T = 50 ms (D about 100 ms): about 25 when the
// store is killed and restarted empty (the refused connections make the
// nodes Degraded within Δ = 100 ms); about 24 under evictions that a node
// reads in its counters (Δ = T + d; measured from outside, two runs of an
// allkeys-lru Redis of 2 MB flooded for 5 s: 20 to 22 for every Shared
// algorithm); up to N*L = 40 while only INFO shows them (Δ up to 2 s).
// The parts:
//
//   - Until the nodes are Degraded they decide as when healthy, on views
//     that may lack the others' units of the last D + Δ (never units a
//     node had read: it keeps the most it read of a live bucket, however
//     short the store answers): the window holds at most
//     U <= L + N*R*(D + Δ) units then.
//   - While Degraded, a node admits only while its own units of the window
//     plus the others' units it last read fit F: FallbackLimit replaces the
//     limit, not the counts, so the node's units of the window from before
//     the outage count against it, and so do the others' it had read. Had
//     every node read all U units, the nodes would bring the window to at
//     most max(U, N*F); each misses at most the others' units of its last
//     D + Δ, and may admit as many more. (Had they read none of each
//     other's, node i would still stop at max(u_i, F) of its own, u_i its
//     units before it turned Degraded.)
//   - When the store answers again, every node raises its own share of a
//     counter to what it sent (Item.Floor) at its next flush of the key,
//     so within T + d the store's total is again the sum of every node's
//     units. (A sliding window's older buckets, which see no new units,
//     are healed one flush later: the flush that reads one of them short
//     of what this node sent for it queues the key again, and the next
//     sends every bucket.) Until then, at most R*D more per node. From
//     there the window admits only while that whole count is below L.
//
// A node flushes a key when it decided it since its last flush, while the
// key is near its limit (then at every flush), and after a flush of it
// failed. A share that a node sent for a key it no longer decides and that
// is far from its limit is not restored until it decides the key again:
// the nodes that had read it keep counting it, but one that had not (it
// started since, or forgot the key) may admit that share again, in that
// window only.
//
// An Exact limiter keeps a journal of the units its process was granted
// that still count (ExactConfig.JournalKeys): those Redis granted and
// those its FailurePolicy granted without Redis, coalesced per key to one
// entry per window (fixed window), per bucket (sliding counter) or per
// quarter window (GCRA, whose units count for one window: the bucket
// drains at L per W for all processes together, so each replays all its
// units of the last window), each at its latest instant. When Redis answers again after an outage, when an episode of
// evictions ends, or when INFO shows Redis restarted (its run_id changed or
// its uptime went back, read by the probe that ends an outage and by the
// eviction check), the limiter stays Degraded and decides by its policy
// until it has sent, in pipelines of a charge script that adds units at
// their instant and never refuses them (the count may pass the limit; the
// decisions after it deny), the units its policy granted, and, when Redis
// may have lost state (a restart, evictions, or an INFO it cannot read),
// every unit of the journal. Units that were not lost are then counted
// twice, for at most the windows they belong to: the stricter side. A
// replay that fails is tried again after the probe's back-off, its units
// kept.
//
// Take N processes, a limit L per window, a fallback limit F per process
// (FallbackLocal; by default F = L, Exact's own limit), u_i the units
// Redis granted process i in a window before the process turned
// Degraded, U their sum, c_i the units of the window Redis counted for
// all processes at process i's last decision by Redis before then (0 if
// none), and m_i = U - c_i the units Redis granted the others after it,
// which process i has not seen; M their sum. Then:
//
//   - While Healthy, process i's fallback records every decision Redis
//     made for it: the units Redis granted it, and at least its share of
//     the cluster's usage that the reply tells, ceil(c*F/L) of the binding
//     rate (c = L - Remaining), charged with Settle (an overdraft never
//     refused, so the process's own units are recorded even in a full
//     fallback). Denied decisions share too: they tell the others' usage.
//     Sharing only ever charges, so a store that answers short (evicted
//     state) never takes back a share already recorded.
//
//   - While Degraded, process i's fallback therefore admits at most
//     f_i <= max(0, F - max(u_i, ceil(c_i*F/L))) more in the window.
//
//   - Each process sends its f_i units (and its u_i if Redis may have lost
//     them) before it decides by Redis again. Once every process has, the
//     store counts every unit of the window and admits only up to L:
//
//     max(L, U + sum_i max(0, F - max(u_i, ceil(c_i*F/L))))
//
//     Since c_i = U - m_i, the sum is at most U*(1 - N*F/L) + N*F +
//     (F/L)*M, so the window holds at most
//
//     max(L, N*F) + (F/L)*M
//
//     whatever the spread of the traffic over the processes, and at most
//     max(L, sum_i max(u_i, F)) <= N*L with the default fallback (each
//     process's own units at most max(u_i, F)). With F = L/N that is
//     L + M/N: L plus, on average over the processes, what each was not
//     told of the others' grants since its own last decision. A process
//     that decides a key every g seconds misses at most what the others
//     were granted in g: with two processes each offered 5 requests/s and
//     a GCRA of 20 per 10 s (2 per second for all), m_i <= 1, so at most
//     L + 1 = 21. (Before the fallback recorded shares, a process that
//     had been granted few of the window's units fell back to an almost
//     full fallback: up to L + (N-1)*F with F = L/N.) Calls that fail
//     before the process turns Degraded are decided by the fallback too,
//     and counted in f_i.
//
//   - Several rates: each decision shares the binding rate of Redis's
//     reply (the least remaining), and the charge counts in every rate of
//     the fallback, so the other rates are charged the same units, the
//     stricter side (a longer rate's fallback may run out before the
//     cluster's share of it). When the fallback binds on another rate than
//     Redis (limits not in proportion to the limits), that rate is charged
//     c/L of its limit; the bound above is exact for the rate both bind on,
//     and every rate keeps the bound of its own units, max(L, sum_i
//     max(u_i, F)).

//   - Processes recover one by one (each its own probe, with its back-off
//     up to MaxProbeInterval, and its own INFO). A process that decides
//     by Redis again while another has not replayed yet may be granted
//     what the store would have refused had it counted the other's units:
//     at most L + sum_j f_j over the processes j not yet replayed (plus
//     their u_j if Redis lost state), still at most N*L with the default
//     fallback; with F = L/N each f_j <= (L - c_j)/N, so at most L plus
//     what the processes not yet replayed had left of their shares.
//
//   - Evictions reach the bound only once noticed: until a reply proves
//     the loss (see Eviction) or the eviction check sees it, an eviction
//     of a key's state is a fresh budget in Redis, so U may pass L by
//     what the processes admit until then, at most N*R*Δ for R requests
//     per second each; the journal has those units, and the replay at the
//     end of the episode brings the store's count back above them. For a
//     process that had seen the state alive (granted or denied), Δ is
//     zero: its first reply after the loss proves it (see Eviction), and
//     its policy decides that call, the calls in flight then and the next
//     (the store's grants from the empty state stay counted, in the store
//     and its journal). A
//     process that had not seen the state (it started since, or its
//     births were full) waits for the eviction check: Δ up to
//     EvictionCheck. A process that proved the loss decides by its policy
//     for two EvictionChecks, by which the eviction check of every
//     process has seen evictions that go on; a loss that INFO does not
//     show (a key deleted by hand) is proved to each process by its own
//     next call only.
//
//   - A restart shorter than an outage (Redis back before DegradeAfter):
//     from the first call that fails with a transport error (a timeout, a
//     refused or broken connection), the limiter decides by its policy
//     until its background goroutine has read INFO (run_id, uptime) and
//     sent the store the units its policy granted (every unit of its
//     journal if INFO shows a restart or cannot tell); a check that fails
//     counts as a failed call toward DegradeAfter and is tried again after
//     the probe's back-off. So no call reaches a store restarted empty
//     before it counts this process's units, whenever the background
//     goroutine runs; only calls already in flight when the first failed
//     may. A restart that no call saw fail is found by the next eviction
//     check: until then Redis decides from empty state.
//
//   - GCRA has no windows: read L and F as its bucket (the burst), which
//     refills at L (Redis) or F (each fallback) per W. The bounds above
//     hold for the bucket's debt (what the store's TAT counts after the
//     replays); in a span of W each process's fallback also admits what
//     its bucket refilled meanwhile, up to F more, as a healthy GCRA
//     admits up to 2L in a span of W. With F = L/N the processes'
//     buckets together refill at L per W, as the store's would.
//
//   - FailOpen admits every request while Degraded (F is unbounded);
//     FailClosed admits none (F = 0): the window then holds at most L
//     (the replay restores what Redis granted before a loss of state).
//
// The journal is bounded: when it holds JournalKeys keys whose units
// still count, the policy denies new keys, and units Redis grants to new
// keys are not recorded (ExactStats.JournalFull counts them; they are not
// restored if Redis then loses state).
//
// # Trust
//
// The store is trusted infrastructure: limits are only as good as the
// counts it keeps, and whoever can write to it, or answer in its place, can
// make any limit admit everything (forged totals, deleted keys) or nothing
// (inflated counters), or make every decision fall back to the local
// limiters (errors, garbage, silence). Give the limiters a store of their
// own, or at least a Redis user whose ACL allows only the key prefix and
// the commands they use, and a network path no client can reach.
//
// What a broken or hostile store cannot do, whatever it answers or
// withholds: make a decision wait past its deadline (Shared's never wait
// for it; Exact's wait at most ExactConfig.Timeout), make Close or
// Shutdown wait past theirs, or make the package panic (every reply is
// decoded with checked type assertions and range checks; what does not fit
// is ErrBadReply). Memory is bounded only with a client that dials through
// LimitReplies: without it one reply can make go-redis allocate gigabytes,
// and nest arrays deeply enough to exceed the goroutine stack limit, which
// is fatal. A store that answers slowly holds one goroutine per abandoned
// call until the client's own timeouts end it (ContextTimeoutEnabled ends
// it at the call's deadline).
//
// Redis 5 or later is required (scripts read the server clock with TIME).
package sync
