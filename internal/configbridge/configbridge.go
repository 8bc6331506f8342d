// Package configbridge lets package sync convert between the root package's
// Config and internal/core's through the root's one conversion. The root
// package defines Config and imports internal/core, so this package cannot
// import the root: the root registers its conversions here when it is
// initialised, and package sync, which imports the root (and so runs after
// that registration), calls them through ToCore and FromCore.
package configbridge

import "github.com/shardlimit/shardlimit/internal/core"

// The registered conversions: a func(C) core.Config and a
// func(core.Config) C, C the root package's Config.
var toCore, fromCore any

// Register records the root package's conversions of its Config type C. The
// root calls it once, while it is initialised; nothing calls it
// concurrently with ToCore or FromCore.
func Register[C any](to func(C) core.Config, from func(core.Config) C) {
	toCore, fromCore = to, from
}

// ToCore returns cfg, the root package's Config, as internal/core's Config.
// C must be the type Register was given.
func ToCore[C any](cfg C) core.Config { return toCore.(func(C) core.Config)(cfg) }

// FromCore returns c as the root package's Config, C the type Register
// was given.
func FromCore[C any](c core.Config) C { return fromCore.(func(core.Config) C)(c) }
