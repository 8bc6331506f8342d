package httpmw

import (
	"testing"

	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// The cases of CASES.md that touch the middleware, key extraction or
// headers, end to end over a real net/http server (see internal/mwtest).

func TestCaseB02PollerRecovers(t *testing.T)         { mwtest.CaseB02(t, harness) }
func TestCaseB06RemainingNeverNegative(t *testing.T) { mwtest.CaseB06(t, harness) }
func TestCaseB07RetryAfterUnits(t *testing.T)        { mwtest.CaseB07(t, harness) }
func TestCaseB08ResetNotEarly(t *testing.T)          { mwtest.CaseB08(t, harness) }
func TestCaseB14ClockBackwardsHeaders(t *testing.T)  { mwtest.CaseB14(t, harness) }
func TestCaseB16NegativeCost(t *testing.T)           { mwtest.CaseB16(t, harness) }
func TestCaseB17ZeroLimitHeaders(t *testing.T)       { mwtest.CaseB17(t, harness) }
func TestCaseB18RuntimeLimitHeaders(t *testing.T)    { mwtest.CaseB18(t, harness) }
func TestCaseB19PerKeyLimit(t *testing.T)            { mwtest.CaseB19(t, harness) }
func TestCaseB21IPv6Prefix(t *testing.T)             { mwtest.CaseB21(t, harness) }
func TestCaseB26SubSecondWindowHeaders(t *testing.T) { mwtest.CaseB26(t, harness) }
func TestCaseB27YearWindowHeaders(t *testing.T)      { mwtest.CaseB27(t, harness) }
func TestCaseB24ConcurrentConnections(t *testing.T) {
	mwtest.CaseB24(t, harness, 100, 20)
}

// The acceptance tests.

func TestSeedRules(t *testing.T) {
	mwtest.SeedRules(t, harness, "../cmd/shardlimit-demo/rules.json")
}
func TestSpoofedForwardedForIgnored(t *testing.T) { mwtest.SpoofedForwardedFor(t, harness) }
func TestTrustedProxyChain(t *testing.T)          { mwtest.TrustedChain(t, harness) }
func TestForwardedHeaderOnly(t *testing.T)        { mwtest.ForwardedHeader(t, harness) }
func TestReloadKeepsCounters(t *testing.T)        { mwtest.ReloadKeepsCounters(t, harness) }
func TestReloadIsAtomic(t *testing.T)             { mwtest.ReloadIsAtomic(t, harness) }
func TestDryRun(t *testing.T)                     { mwtest.DryRun(t, harness) }
func TestHooks(t *testing.T)                      { mwtest.Hooks(t, harness) }
func TestEmptyKeys(t *testing.T)                  { mwtest.EmptyKeys(t, harness) }
func TestUnknownIdentities(t *testing.T)          { mwtest.UnknownIdentities(t, harness) }
func TestFailures(t *testing.T)                   { mwtest.Failures(t, harness) }
func TestHeaderSets(t *testing.T)                 { mwtest.HeaderSets(t, harness) }

// Rules of several limits.

func TestRatesDenialConsumesNothing(t *testing.T) { mwtest.RatesDenialConsumesNothing(t, harness) }
func TestRatesRetryAfter(t *testing.T)            { mwtest.RatesRetryAfter(t, harness) }
func TestRatesHeaders(t *testing.T)               { mwtest.RatesHeaders(t, harness) }
func TestRatesReload(t *testing.T)                { mwtest.RatesReload(t, harness) }
