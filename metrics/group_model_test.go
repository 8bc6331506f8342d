package metrics

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// refState and refSettle are the reference model of counterState's
// settleMembers: the members of a collection in a map by rule name, as
// they were kept before members became a list merged by name.
type refState struct {
	carried    float64
	last, gone map[string]member
}

func (st *refState) settle(now map[string]member) {
	kept := func(rule string) bool {
		old, ok := st.last[rule]
		cur, here := now[rule]
		same, _ := sameLimiter(old.lim, cur.lim)
		return ok && here && same && cur.v >= old.v
	}
	for rule, cur := range now {
		if g, ok := st.gone[rule]; ok && !kept(rule) {
			if same, sure := sameLimiter(g.lim, cur.lim); same && sure && cur.v >= g.v {
				st.carried -= g.v
				delete(st.gone, rule)
			}
		}
	}
	for rule, old := range st.last {
		if kept(rule) {
			continue
		}
		st.carried += old.v
		if st.gone == nil {
			st.gone = map[string]member{}
		}
		st.gone[rule] = old
	}
	st.last = now
}

// TestSettleMembersModel checks settleMembers against the reference model
// over random collections: rules that come and go, limiters replaced and
// restored, counts that go up and down. What is carried and what is
// remembered as gone must agree at every step.
func TestSettleMembersModel(t *testing.T) {
	var lims []shardlimit.Limiter
	for range 3 {
		l, err := shardlimit.New(shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 9, Window: time.Minute, JanitorInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		lims = append(lims, l)
	}
	r := rand.New(rand.NewPCG(21, 3))
	for trial := range 300 {
		var st counterState
		var ref refState
		lim := map[string]shardlimit.Limiter{}
		val := map[string]float64{}
		for step := range 40 {
			var rules []ruleRef
			var now []memberValue
			nowMap := map[string]member{}
			for k := range 8 { // names in order: r0 ... r7
				name := fmt.Sprint("r", k)
				if r.IntN(4) == 0 {
					continue // not a member this time
				}
				if lim[name] == nil || r.IntN(6) == 0 {
					lim[name] = lims[r.IntN(len(lims))] // replaced (or restored)
				}
				switch r.IntN(5) {
				case 0:
					val[name] = float64(r.IntN(3)) // down, or a fresh limiter's count
				default:
					val[name] += float64(r.IntN(4))
				}
				i := int32(len(rules))
				rules = append(rules, ruleRef{name, lim[name]})
				now = append(now, memberValue{i, val[name]})
				nowMap[name] = member{val[name], lim[name]}
			}
			st.settleMembers(now, rules)
			st.last, st.lastRules = now, rules
			ref.settle(nowMap)
			if st.carried != ref.carried || len(st.gone) != len(ref.gone) {
				t.Fatalf("trial %d step %d: carried %v, %d gone; the model %v, %d gone", trial, step, st.carried, len(st.gone), ref.carried, len(ref.gone))
			}
			for name, g := range ref.gone {
				if got, ok := st.gone[name]; !ok || got != g {
					t.Fatalf("trial %d step %d: gone[%s] = %v, %v; the model %v", trial, step, name, got, ok, g)
				}
			}
		}
	}
}
