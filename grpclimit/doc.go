// Package grpclimit is shardlimit's rate limiting for gRPC servers: unary
// and stream server interceptors that limit each client per method, on the
// rules, keys, tiers, overrides, reloads, dry run, bans and metrics of the
// HTTP middleware (package httpmw), decided by the same engine. It is a
// module of its own, so that grpc-go stays out of shardlimit's go.mod.
//
//	rules, err := httplimit.LoadRules("rules.json") // "prefix": "/pkg.Service/" ...
//	if err != nil {
//		log.Fatal(err)
//	}
//	lim, err := grpclimit.NewServer(grpclimit.ServerConfig{Options: httplimit.Options{
//		Rules: rules,
//		Keys:  httplimit.KeyConfig{Header: "x-api-key"}, // a metadata key; default: the peer address
//	}})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer lim.Close()
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()),
//	)
//
// A rule's Path or Prefix matches the call's full method: Path
// "/pkg.Service/Method" one method, Prefix "/pkg.Service/" a whole
// service. Every call is matched as method "POST" (Method).
//
// An admitted call gets the rate-limit fields as response header metadata,
// named as the HTTP fields in lower case: "x-ratelimit-limit",
// "x-ratelimit-remaining", "x-ratelimit-reset" (seconds), and with
// HeaderConfig.IETF "ratelimit-policy" and "ratelimit". A denied call is
// answered codes.ResourceExhausted with the same fields plus
// "retry-after" (whole seconds, at least 1) and the status details
// google.rpc.RetryInfo, whose retry_delay is the exact wait after which the
// same call would be admitted (for a banned client, the later of the ban's
// end and that), and google.rpc.QuotaFailure, whose subject names the rule
// and the kind of client key ("rule:svc client:identity"), never the key,
// which may be a secret API key. Clients read
// them with grpc.Header and status.FromError(err).Details().
//
// A stream is decided once when it opens; with ServerConfig.PerMessage
// each message the client sends is decided too. For a known client the
// allowed path allocates to send the fields (the metadata map and its
// values, and gRPC's own copy when it merges them into the call's header;
// see BenchmarkUnaryAllowed), once to read the client's key from request
// metadata (Keys.Header, or a trusted proxy's x-forwarded-for: grpc-go's
// metadata.ValueFromIncomingContext copies the values), once to settle a
// call after its handler (Rule.Count, FinalCost), and for nothing else.
//
// The limit is the promise: a call is never admitted beyond a rule's
// limit to save time, and when a decision fails (a full key table, a
// closed Server) the call is refused codes.Unavailable unless
// Options.OnError is FailOpen.
package grpclimit
