package fasthttpmw

import (
	"testing"

	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// The scenarios that touch the middleware, key extraction or
// headers, end to end over a real fasthttp server (see internal/mwtest).

func TestPollerRecovers(t *testing.T)         { mwtest.PollerRecovers(t, harness) }
func TestRemainingNeverNegative(t *testing.T) { mwtest.RemainingNeverNegative(t, harness) }
func TestRetryAfterUnits(t *testing.T)        { mwtest.RetryAfterUnits(t, harness) }
func TestResetNotEarly(t *testing.T)          { mwtest.ResetNotEarly(t, harness) }
func TestClockBackwardsHeaders(t *testing.T)  { mwtest.ClockBackwardsHeaders(t, harness) }
func TestNegativeCost(t *testing.T)           { mwtest.NegativeCost(t, harness) }
func TestZeroLimitHeaders(t *testing.T)       { mwtest.ZeroLimitHeaders(t, harness) }
func TestRuntimeLimitHeaders(t *testing.T)    { mwtest.RuntimeLimitHeaders(t, harness) }
func TestPerKeyLimit(t *testing.T)            { mwtest.PerKeyLimit(t, harness) }
func TestIPv6Prefix(t *testing.T)             { mwtest.IPv6Prefix(t, harness) }
func TestSubSecondWindowHeaders(t *testing.T) { mwtest.SubSecondWindowHeaders(t, harness) }
func TestYearWindowHeaders(t *testing.T)      { mwtest.YearWindowHeaders(t, harness) }
func TestConcurrentConnections(t *testing.T) {
	mwtest.ConcurrentConnections(t, harness, 100, 20)
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
