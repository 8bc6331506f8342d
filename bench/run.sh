#!/usr/bin/env bash
# bench/run.sh: run shardlimit's comparison benchmarks and accuracy report,
# summarise them with benchstat, and write a markdown report.
#
#   bench/run.sh                 full run: -count 6, report in bench/results/latest.md
#   bench/run.sh -smoke          CI smoke: vet and unit tests, every benchmark once
#                                (-benchtime=1x, -count 1, 10,000 keys instead of a
#                                million), the accuracy report in -quick mode; report
#                                in $TMPDIR unless -out is given
#   bench/run.sh -report         no runs: the report again from results/raw/ (after
#                                appending a scenario's `go test` output there)
#
# Options (full run defaults in brackets):
#   -count N        runs of every benchmark [6]; benchstat wants >= 6 for intervals.
#                   The Harness family runs as N rounds of -count 1, interleaving
#                   the limiters, as the independent harness it reproduces did
#   -benchtime D    go test -benchtime [1s]
#   -cpu LIST       GOMAXPROCS values of the parallel scenarios
#                   [1,2,4,... up to the core count, and the core count]
#   -bench REGEXP   only top-level benchmarks matching REGEXP (every package)
#   -out FILE       report file [bench/results/latest.md]
#
# Redis: redis_rate runs against $BENCH_REDIS_ADDR (default 127.0.0.1:6379);
# if Redis does not answer, its benchmarks are skipped and the report says so.
# The sync benchmarks (syncbench) start a private redis-server on a loopback
# port and are skipped if redis-server is not on PATH.
# Raw `go test` output and benchstat's text are kept beside the report in
# results/raw/ (full run) so that anyone can re-run benchstat on them.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

smoke=0
report=0
count=6
benchtime=1s
cpu=""
filter="."
out=""
while [ $# -gt 0 ]; do
	case "$1" in
	-smoke | --smoke) smoke=1 ;;
	-report | --report) report=1 ;;
	-count) count=$2; shift ;;
	-benchtime) benchtime=$2; shift ;;
	-cpu) cpu=$2; shift ;;
	-bench) filter=$2; shift ;;
	-out) out=$2; shift ;;
	-h | -help | --help) sed -n '2,28p' "$here/run.sh"; exit 0 ;;
	*) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)
if [ -z "$cpu" ]; then
	cpu=1
	p=2
	while [ "$p" -lt "$cores" ]; do cpu="$cpu,$p"; p=$((p * 2)); done
	[ "$cores" -gt 1 ] && cpu="$cpu,$cores"
fi

if [ "$smoke" = 1 ]; then
	count=1
	benchtime=1x
	export SHARDLIMIT_BENCH_KEYS=10000 # the million-key scenarios, with 10,000
	work=$(mktemp -d "${TMPDIR:-/tmp}/shardlimit-bench.XXXXXX")
	[ -n "$out" ] || out="$work/smoke.md"
	accflags=-quick
else
	mkdir -p results/raw
	work="$here/results/raw"
	[ -n "$out" ] || out="$here/results/latest.md"
	accflags=
fi

# The single-goroutine scenarios run at the default GOMAXPROCS; the parallel
# ones at every value of -cpu.
serial='^Benchmark(HotKey|HotKeyNow|Denied|DeniedNow|BytesKey|BytesKeyNow|Memory)$'
parallel='^Benchmark(HotKeyParallel|HotKeyNowParallel|MillionKeysParallel|MillionKeysNowParallel|MillionKeysShuffledParallel|MillionKeysShuffledNowParallel)$'
# The Harness family (harness_test.go) runs at the default GOMAXPROCS, in
# rounds.
harness='^Benchmark(HarnessHotKey|HarnessDenied|HarnessMillionKeysParallel|HarnessArenaMillionKeysParallel)$'
mw='^Benchmark'
syncre='^BenchmarkSync'

# keep prints the benchmarks of regexp $1 that also match the -bench filter,
# or nothing.
keep() {
	if [ "$filter" = "." ]; then
		echo "$1"
	else
		go test -list "$1" "${2:-.}" 2>/dev/null | grep '^Benchmark' | grep -E -- "$filter" |
			paste -sd'|' - | sed 's/^\(..*\)$/^(\1)$/'
	fi
}

start=$(date +%s)
redis="answering at ${BENCH_REDIS_ADDR:-127.0.0.1:6379}"
if ! go run ./cmd/redisping >/dev/null 2>&1; then
	redis="NOT answering at ${BENCH_REDIS_ADDR:-127.0.0.1:6379}: redis_rate benchmarks skipped"
fi
echo "run.sh: redis $redis" >&2

if [ "$smoke" = 1 ]; then
	echo "run.sh: go vet and unit tests" >&2
	go vet ./...
	go test -count=1 ./...
fi

# bench runs go test -bench $1 in package $2 with extra flags, into $3.
bench() {
	local re=$1 pkg=$2 file=$3
	shift 3
	if [ -z "$re" ]; then
		: >"$file"
		return
	fi
	echo "run.sh: go test -bench '$re' $pkg $*" >&2
	go test -run '^$' -bench "$re" -benchmem -count "$count" -benchtime "$benchtime" -timeout 2h "$@" "$pkg" | tee "$file"
}

# rounds runs go test -bench $1 in package $2 $count times with -count 1,
# into $3: each round runs every limiter once, so drift in the machine's
# speed spreads over all of them instead of falling on some.
rounds() {
	local re=$1 pkg=$2 file=$3
	: >"$file"
	[ -n "$re" ] || return 0
	for r in $(seq "$count"); do
		echo "run.sh: go test -bench '$re' $pkg, round $r of $count" >&2
		go test -run '^$' -bench "$re" -benchmem -count 1 -benchtime "$benchtime" -timeout 2h "$pkg" | tee -a "$file"
	done
}

if [ "$report" = 0 ]; then
	bench "$(keep "$serial")" . "$work/serial.txt"
	bench "$(keep "$parallel")" . "$work/parallel.txt" -cpu "$cpu"
	rounds "$(keep "$harness")" . "$work/harness.txt"
	bench "$(keep "$mw" ./mw)" ./mw "$work/mw.txt"
	bench "$(keep "$syncre" ./syncbench)" ./syncbench "$work/sync.txt"

	echo "run.sh: accuracy report" >&2
	go run ./cmd/accuracy $accflags >"$work/accuracy.md"
	echo "$(($(date +%s) - start))" >"$work/runtime.txt"
fi

csvs=()
for f in serial parallel harness mw; do
	[ -s "$work/$f.txt" ] || continue
	go tool benchstat "$work/$f.txt" >"$work/$f.benchstat.txt" 2>/dev/null || true
	go tool benchstat -format csv "$work/$f.txt" >"$work/$f.csv" 2>/dev/null || true
	csvs+=("$work/$f.csv")
done

# The sync benchmarks compare implementations (sub-benchmark key impl=)
# rather than limiters: benchstat puts them side by side, the first as base
# (local for SyncAllow, shared for SyncRedisCommands, exact for
# SyncRoundTrip).
if [ -s "$work/sync.txt" ]; then
	for name in SyncAllow SyncRedisCommands SyncRedisCPU SyncRoundTrip; do
		go tool benchstat -col /impl -filter ".name:$name" "$work/sync.txt" 2>/dev/null || true
	done >"$work/sync.benchstat.txt"
fi

model=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
[ -n "$model" ] || model=$(uname -m)
elapsed=$(($(date +%s) - start))

{
	if [ "$smoke" = 1 ]; then
		echo "# shardlimit benchmarks: smoke run (numbers meaningless)"
	else
		echo "# shardlimit benchmarks"
	fi
	echo
	echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "- machine: $cores cores, $model, $(uname -sr)"
	echo "- load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
	echo "- $(go version)"
	echo "- go test -count $count -benchtime $benchtime; parallel scenarios at -cpu $cpu"
	echo "- redis: $redis"
	if [ "$report" = 1 ]; then
		echo "- run time: $(cat "$work/runtime.txt" 2>/dev/null || echo unknown)s; report written again from results/raw at $(date -u '+%H:%M UTC')"
	else
		echo "- run time: ${elapsed}s"
	fi
	echo
	echo "Every table states each limiter against the fastest peer of the same run"
	echo "(\"× reference\": below 1 is faster than the fastest peer). A scenario and its"
	echo "\"Now\" twin share the reference: the fastest peer however it reads the time."
	echo "\"× same call\" compares like with like where the two differ: the fastest peer"
	echo "of the scenario itself (for Allow, a peer's Allow with its own clock read)."
	echo "Memory compares B/key with the fewest of the peers that keep the full key."
	echo "Medians from benchstat; the full benchstat output with confidence intervals"
	echo "follows the tables. See bench/README.md for what each scenario measures."
	echo "The Harness scenarios reproduce an independent harness (one-method interface,"
	echo "each limiter's own clock, random-order keys, goroutines starting far apart,"
	echo "rounds interleaved across limiters)."
	echo
	echo "## Medians and ratios"
	echo
	if [ ${#csvs[@]} -gt 0 ]; then
		go run ./cmd/benchreport "${csvs[@]}"
	fi
	echo "## benchstat"
	for f in serial parallel harness mw; do
		[ -s "$work/$f.benchstat.txt" ] || continue
		echo
		echo '```'
		cat "$work/$f.benchstat.txt"
		echo '```'
	done
	if [ -s "$work/sync.benchstat.txt" ]; then
		echo
		echo "## Redis sync (syncbench)"
		echo
		echo "SyncAllow: AllowN on 1,000 keys, local limiter against sync.Shared flushing"
		echo "to a private Redis every 50 ms. SyncRedisCommands: 2,000 requests at"
		echo "5,000/s over 10 or 1,000 keys; cmds/req and rtt/req are what this node"
		echo "sends, server-ops/req what Redis runs (scripts' own calls included)."
		echo "SyncRedisCPU: 10,000 requests at 5,000/s over 1,000 or 100,000 keys;"
		echo "redis-cpu-us/req is the server's used_cpu_user + used_cpu_sys per request."
		echo "SyncRoundTrip: one decision by a round trip, sync.Exact (GCRA) against"
		echo "redis_rate, serial over 1,000 keys; allocs/op includes go-redis's."
		echo
		echo '```'
		cat "$work/sync.benchstat.txt"
		echo '```'
	fi
	echo
	sed 's/^#/##/' "$work/accuracy.md"
} >"$out"

echo "run.sh: report in $out (${elapsed}s)" >&2
