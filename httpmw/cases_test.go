package httpmw

import (
	"testing"

	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// TestCases runs the scenarios both middlewares share (mwtest.Cases), end
// to end over a real net/http server.
func TestCases(t *testing.T) { mwtest.RunAll(t, harness) }
