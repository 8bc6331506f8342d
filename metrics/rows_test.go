package metrics

import (
	"reflect"
	"strings"
	"testing"

	shardsync "github.com/shardlimit/shardlimit/sync"
)

// storeFields says, for each field of sync.SharedStats and
// sync.ExactStats, which family exports it, or why none does.
var storeFields = map[string]string{
	"State": "shardlimit_store_healthy", "Trips": "shardlimit_store_trips_total",
	"Recoveries": "shardlimit_store_recoveries_total", "Flushes": "shardlimit_shared_flushes_total",
	"FailedFlushes": "shardlimit_shared_flushes_failed_total", "Items": "shardlimit_shared_items_total",
	"ItemErrors": "shardlimit_shared_item_errors_total", "BadReplies": "shardlimit_store_bad_replies_total",
	"LastKeys": "shardlimit_shared_flush_keys", "NearKeys": "shardlimit_shared_near_keys",
	"LastLatency": "shardlimit_shared_flush_duration_seconds", "MaxLatency": "shardlimit_shared_flush_duration_max_seconds",
	"MaxFlushGap": "shardlimit_shared_flush_gap_max_seconds", "SentUnits": "shardlimit_shared_units_sent_total",
	"RetriedUnits": "shardlimit_shared_units_retried_total", "UnknownUnits": "shardlimit_shared_units_unknown_total",
	"DroppedUnits": "shardlimit_shared_units_dropped_total", "LostUnits": "shardlimit_shared_units_lost_total and shardlimit_exact_units_lost_total", "Losses": "shardlimit_shared_losses_total and shardlimit_exact_losses_total", "ClockOffset": "shardlimit_shared_clock_offset_seconds",
	"Pending": "shardlimit_shared_pending_keys", "Calls": "shardlimit_exact_calls_total",
	"Errors": "shardlimit_exact_call_errors_total", "Timeouts": "shardlimit_exact_call_timeouts_total",
	"PolicyDecisions": "shardlimit_exact_policy_decisions_total", "Probes": "shardlimit_exact_probes_total",
	"ProbeFailures":   "shardlimit_exact_probe_failures_total",
	"JournalKeys":     "shardlimit_exact_journal_keys",
	"JournalFull":     "shardlimit_exact_journal_full_total",
	"Replays":         "shardlimit_exact_replays_total",
	"ReplayFailures":  "shardlimit_exact_replay_failures_total",
	"Replayed":        "shardlimit_exact_replayed_total",
	"ReplayRejected":  "shardlimit_exact_replay_rejected_total",
	"DenyCacheHits":   "shardlimit_exact_deny_cache_hits_total",
	"Eviction":        "shardlimit_store_evicting and shardlimit_store_evicted_keys_total",
	"LastError":       "- an error, not a number: shown by the demo's /status",
	"PolicyShare":     "shardlimit_store_policy_share",
	"RecentDecisions": "- the count PolicyShare is a share of: shown by the demo's /status",
	"RecentItems":     "- the count PolicyShare is a share of: shown by the demo's /status",
}

// TestEveryStoreFieldExported is a tripwire: each field of
// sync.SharedStats and sync.ExactStats is listed in storeFields, with its
// family or the reason it has none. A field added to either fails it
// until it gets a row in metrics/families.go and a line here.
func TestEveryStoreFieldExported(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[shardsync.SharedStats](), reflect.TypeFor[shardsync.ExactStats]()} {
		for f := range typ.Fields() {
			if _, ok := storeFields[f.Name]; !ok {
				t.Errorf("%v.%s has no family: add a row to metrics/families.go and a line to storeFields", typ, f.Name)
			}
		}
	}
	names := map[string]bool{}
	for _, f := range Families() {
		names[f.Name] = true
	}
	for field, fam := range storeFields {
		for _, name := range strings.Split(fam, " and ") {
			if !strings.HasPrefix(name, "-") && !names[name] {
				t.Errorf("storeFields says %s is exported as %s, which is not a family", field, name)
			}
		}
	}
}

// TestGroupAggregatesNameFamilies is a tripwire: every family that
// groupAggregates combines otherwise than by a sum is a family, and only
// gauges are combined as the same value or as 1; no family has more
// labels than a group's seriesID holds.
func TestGroupAggregatesNameFamilies(t *testing.T) {
	byName := map[string]*Family{}
	for _, f := range Families() {
		byName[f.Name] = f
	}
	for _, f := range byName {
		if len(f.Labels) > 3 {
			t.Errorf("%s has %d labels: seriesID holds limiter and two more", f.Name, len(f.Labels))
		}
	}
	for name, agg := range groupAggregates {
		f := byName[name]
		if f == nil {
			t.Errorf("groupAggregates names %s, which is not a family", name)
		} else if f.Type == Counter && agg != aggSum && agg != aggMax {
			t.Errorf("counter %s combined by %d: counters are summed or take the greatest", name, agg)
		}
	}
}
