package shardlimit

import (
	"reflect"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/internal/core"
)

// TestConfigConversionKeepsEveryField fails when a field of Config is added
// to one side and not to the generated conversion (internal/gen/configconv):
// every field set, converted to internal/core's Config and back, comes back.
func TestConfigConversionKeepsEveryField(t *testing.T) {
	if got, want := reflect.TypeFor[core.Config]().NumField(), reflect.TypeFor[Config]().NumField(); got != want {
		t.Fatalf("core.Config has %d fields, Config %d", got, want)
	}
	cfg := Config{
		Algorithm: SlidingLog, Limit: 3, Window: time.Second, Buckets: 5, Shards: 8,
		MaxKeys: 9, WhenFull: EvictLeastRecent, MaxKeyBytes: 10, JanitorInterval: time.Hour,
		Clock: NewManualClock(time.Unix(1, 0)), Rates: []Rate{{Limit: 3, Window: time.Second}},
	}
	v := reflect.ValueOf(cfg)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the test leaves Config.%s unset", v.Type().Field(i).Name)
		}
	}
	if back := fromCore(toCore(cfg)); !reflect.DeepEqual(back, cfg) {
		t.Fatalf("round trip: %+v, want %+v", back, cfg)
	}
}
