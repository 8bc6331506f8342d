package fasthttpmw

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// fasthttp starts one process-wide goroutine that refreshes the Date
	// header once a second and never stops (by design, like net/http's
	// shared state); every other goroutine must be gone.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"))
}
