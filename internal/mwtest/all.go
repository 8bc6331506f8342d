package mwtest

import "testing"

// Case is a scenario both middlewares run, named for the behaviour it
// checks.
type Case struct {
	// Name names the behaviour: the subtest's name.
	Name string
	// Run runs the scenario against the middleware h starts.
	Run func(t *testing.T, h Harness)
}

// Cases are the scenarios every middleware runs end to end over its real
// server: the ones that touch the middleware, key extraction or headers,
// the acceptance tests, and those of rules of several limits.
var Cases = []Case{
	{"PollerRecovers", PollerRecovers},
	{"RemainingNeverNegative", RemainingNeverNegative},
	{"RetryAfterUnits", RetryAfterUnits},
	{"ResetNotEarly", ResetNotEarly},
	{"ClockBackwardsHeaders", ClockBackwardsHeaders},
	{"NegativeCost", NegativeCost},
	{"ZeroLimitHeaders", ZeroLimitHeaders},
	{"RuntimeLimitHeaders", RuntimeLimitHeaders},
	{"PerKeyLimit", PerKeyLimit},
	{"IPv6Prefix", IPv6Prefix},
	{"SubSecondWindowHeaders", SubSecondWindowHeaders},
	{"YearWindowHeaders", YearWindowHeaders},
	{"ConcurrentConnections", func(t *testing.T, h Harness) { ConcurrentConnections(t, h, 100, 20) }},

	// The acceptance tests. The seed rules' path is relative to
	// the middleware package's directory, where its tests run.
	{"SeedRules", func(t *testing.T, h Harness) { SeedRules(t, h, "../cmd/shardlimit-demo/rules.json") }},
	{"SpoofedForwardedForIgnored", SpoofedForwardedFor},
	{"TrustedProxyChain", TrustedChain},
	{"ForwardedHeaderOnly", ForwardedHeader},
	{"ReloadKeepsCounters", ReloadKeepsCounters},
	{"ReloadIsAtomic", ReloadIsAtomic},
	{"DryRun", DryRun},
	{"Hooks", Hooks},
	{"EmptyKeys", EmptyKeys},
	{"UnknownIdentities", UnknownIdentities},
	{"Failures", Failures},
	{"HeaderSets", HeaderSets},

	// Rules of several limits.
	{"RatesDenialConsumesNothing", RatesDenialConsumesNothing},
	{"RatesRetryAfter", RatesRetryAfter},
	{"RatesHeaders", RatesHeaders},
	{"RatesReload", RatesReload},

	// Policies: exempt and deny lists, shadow rules, the tier and error
	// hooks.
	{"ExemptNeverLimited", ExemptNeverLimited},
	{"DenyListed403", DenyListed403},
	{"ShadowCountsWouldDeny", ShadowCountsWouldDeny},
	{"ReloadSwapsLists", ReloadSwapsLists},
	{"TierHook", TierHook},
	{"ErrorHook", ErrorHook},
}

// RunAll runs every case of Cases against h, each as a subtest of its
// name.
func RunAll(t *testing.T, h Harness) {
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) { c.Run(t, h) })
	}
}
