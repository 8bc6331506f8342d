package outbound

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine (a waiter, a test
// server's) outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
