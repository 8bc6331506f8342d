package outbound

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestMain fails the package's tests if any goroutine (a waiter, a test
// server's) outlives them, and stops the Redis a test started, if any.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.StopAtExit(m))
}
