package metrics_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/shardlimit/shardlimit/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.StopAtExit(m),
		// As in package sync's tests: go-redis's dial prober notices a
		// closed pool only when its sleep ends.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	)
}
