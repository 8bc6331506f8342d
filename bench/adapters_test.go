package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// testLimiter builds f's limiter for p, skipping the test if Redis is not
// answering.
func testLimiter(t *testing.T, f Factory, p Profile) Keyed {
	t.Helper()
	l, err := f.New(p)
	if errors.Is(err, ErrNoRedis) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// TestAdaptersProfiles checks that every adapter admits on the Allowed
// profile and denies the second request on the Denied one, for string and
// []byte keys, so that the benchmarks measure the path they claim to.
func TestAdaptersProfiles(t *testing.T) {
	for _, f := range Factories() {
		t.Run(f.Name, func(t *testing.T) {
			key := fmt.Sprintf("test-%s-%d", f.Name, time.Now().UnixNano())
			l := testLimiter(t, f, Allowed)
			for i := range 1000 {
				if !l.Allow(key) || !l.AllowBytes([]byte(key)) {
					t.Fatalf("allowed profile denied request %d", i)
				}
			}
			forget(l, key)
			l = testLimiter(t, f, Denied)
			defer forget(l, key)
			if !prepare(l, key) {
				t.Fatal("denied profile denied the first request")
			}
			for i := range 10 {
				if l.Allow(key) || l.AllowBytes([]byte(key)) {
					t.Fatalf("denied profile admitted request %d after the first", i)
				}
			}
		})
	}
}

// TestAdaptersExplicitNow checks the AtKeyed adapters against the instants
// they are given: one request per hour, then another an hour later.
func TestAdaptersExplicitNow(t *testing.T) {
	for _, f := range atFactories() {
		t.Run(f.Name, func(t *testing.T) {
			l := testLimiter(t, f, Denied).(AtKeyed)
			t0 := time.Unix(1_700_000_000, 0)
			if !l.AllowAt("k", t0) {
				t.Fatal("first request denied")
			}
			if l.AllowAt("k", t0.Add(time.Minute)) || l.AllowBytesAt([]byte("k"), t0.Add(2*time.Minute)) {
				t.Fatal("second request in the hour admitted")
			}
			if !l.AllowBytesAt([]byte("k"), t0.Add(2*time.Hour)) {
				t.Fatal("request two hours later denied")
			}
		})
	}
}

// TestStepKeepsLogAllowed runs shardlimit's sliding log at its Step pace
// for three windows: it must admit every request.
func TestStepKeepsLogAllowed(t *testing.T) {
	l, err := NewOurs(ourAlgorithms[1], Allowed)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Step() <= 0 {
		t.Fatal("sliding log has no step")
	}
	s := newNowSeq(l, time.Now(), 1, nil)
	for i := range 3 * int(AllowedLog.Window/l.Step()) {
		if !l.AllowAt(hotKey, s.next()) {
			t.Fatalf("request %d denied", i)
		}
	}
}

// TestThrottledReplay checks that the replay store reads the instants given
// to AllowAt: a limit of 2 per second, refilled one request per 500 ms.
func TestThrottledReplay(t *testing.T) {
	l, err := NewThrottledReplay(Profile{Limit: 2, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	got := []bool{
		l.AllowAt("k", t0), l.AllowAt("k", t0), l.AllowAt("k", t0),
		l.AllowAt("k", t0.Add(500*time.Millisecond)), l.AllowAt("k", t0.Add(500*time.Millisecond)),
	}
	want := []bool{true, true, false, true, false}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestKeySet checks the key set's shape: distinct (NewKeySet verifies it),
// 8 to 11 bytes with every length well represented, deterministic.
func TestKeySet(t *testing.T) {
	ks, err := NewKeySet(100_000, 7)
	if err != nil {
		t.Fatal(err)
	}
	if ks.Len() != 100_000 {
		t.Fatalf("Len = %d", ks.Len())
	}
	lens := map[int]int{}
	for i := range ks.Len() {
		if string(ks.Bytes(i)) != ks.Key(i) {
			t.Fatalf("key %d: bytes and string differ", i)
		}
		lens[len(ks.Key(i))]++
	}
	for n := 8; n <= 11; n++ {
		if lens[n] < ks.Len()/8 {
			t.Errorf("only %d keys of %d bytes", lens[n], n)
		}
	}
	again, _ := NewKeySet(100_000, 7)
	if again.Key(99_999) != ks.Key(99_999) {
		t.Error("key set is not deterministic")
	}
}

// TestExactLog pins the reference's window: a request admitted at s counts
// at t iff s <= t < s+W.
func TestExactLog(t *testing.T) {
	e := NewExactLog(2, time.Second)
	s := int64(time.Second)
	steps := []struct {
		at   int64
		want bool
	}{
		{0, true}, {s / 2, true}, {s - 1, false}, {s, true}, {s, false},
		{s + s/2 - 1, false}, {s + s/2, true}, {3 * s, true}, {3 * s, true}, {3 * s, false},
	}
	for i, st := range steps {
		if got := e.AllowAt("k", st.at); got != st.want {
			t.Fatalf("step %d at %d: got %v, want %v", i, st.at, got, st.want)
		}
	}
}

// TestExactLogMatchesSlidingLog checks shardlimit's sliding log against the
// reference on random traffic: both are exact, so every decision agrees.
func TestExactLogMatchesSlidingLog(t *testing.T) {
	const limit, window = 5, time.Second
	ref := NewExactLog(limit, window)
	ours, err := NewOurs(ourAlgorithms[1], Profile{Limit: limit, Window: window})
	if err != nil {
		t.Fatal(err)
	}
	defer ours.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Unix(1_700_000_000, 0).UnixNano()
	for i := range 200_000 {
		now += rng.Int64N(int64(window) / 5)
		key := fmt.Sprint(rng.IntN(3))
		if r, o := ref.AllowAt(key, now), ours.AllowAt(key, time.Unix(0, now)); r != o {
			t.Fatalf("request %d at %d: reference %v, sliding log %v", i, now, r, o)
		}
	}
}

// TestMaxInWindow pins the half-open interval [s, s+W).
func TestMaxInWindow(t *testing.T) {
	ts := []int64{0, 1, 2, 10, 11, 12, 13, 20}
	if got := MaxInWindow(ts, 10); got != 4 {
		t.Fatalf("got %d, want 4 ([10,20) holds 10..13)", got)
	}
	if got := MaxInWindow(ts, 11); got != 5 {
		t.Fatalf("got %d, want 5 ([10,21) holds 10..13 and 20)", got)
	}
}
