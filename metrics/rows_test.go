package metrics

import (
	"reflect"
	"testing"

	shardsync "github.com/shardlimit/shardlimit/sync"
)

// TestEveryStoreFieldExported is a tripwire: each field of
// sync.SharedStats and sync.ExactStats has its row in sharedRows or
// exactRows. A field added to either fails it until it gets a row (a
// family with its help) or a reason to stay out.
func TestEveryStoreFieldExported(t *testing.T) {
	if n, m := reflect.TypeFor[shardsync.SharedStats]().NumField(), len(sharedRows); n != m {
		t.Errorf("sync.SharedStats has %d fields, sharedRows %d rows: add a row to metrics/families.go for the new field", n, m)
	}
	if n, m := reflect.TypeFor[shardsync.ExactStats]().NumField(), len(exactRows); n != m {
		t.Errorf("sync.ExactStats has %d fields, exactRows %d rows: add a row to metrics/families.go for the new field", n, m)
	}
}
