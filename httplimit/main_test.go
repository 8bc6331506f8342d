package httplimit

import (
	"testing"

	"github.com/shardlimit/shardlimit/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.StopAtExit(m))
}
