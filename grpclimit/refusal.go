package grpclimit

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwengine"
)

// refusal returns the status error of a call refused by decision o, whose
// reply rp (not Next) Reply formatted into sc, as UnaryServerInterceptor
// documents; fail is the code of a failed decision refused.
func refusal(o *mwengine.Outcome, sc *mwengine.Scratch, rp mwengine.Reply, fail codes.Code) error {
	msg := strings.TrimSuffix(string(rp.Body), "\n")
	var code codes.Code
	switch o.Action {
	case httplimit.ActionDeny, httplimit.ActionBanned:
		code = codes.ResourceExhausted
	case httplimit.ActionTooManyInFlight:
		code = codes.ResourceExhausted
		if rp.Status == mwengine.StatusServiceUnavailable {
			code = codes.Unavailable
		}
	case httplimit.ActionDenyListed:
		return status.Error(codes.PermissionDenied, msg)
	case httplimit.ActionNoIdentity:
		return status.Error(codes.Unauthenticated, msg)
	case httplimit.ActionBadCost:
		return status.Error(codes.Internal, msg)
	default: // ActionFailClosed
		return status.Error(fail, msg)
	}
	st := status.New(code, msg)
	var details []protoadapt.MessageV1
	if d := o.Result.RetryAfter; d != shardlimit.Never && d >= 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	}
	_, desc, _ := strings.Cut(msg, ": ")
	details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject: quotaSubject(o.Rule, sc.Key), Description: desc,
	}}})
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}

// HTTPStatus returns the HTTP status that the gRPC code of err maps to (200
// for nil; the mapping of Google's API design guide, as grpc-gateway uses
// it): what Rule.Count and Options.FailedResponse judge a call's outcome
// by, so that "failed" means status >= 400 for gRPC calls as for HTTP
// requests. An error without a gRPC status is codes.Unknown (500).
func HTTPStatus(err error) int {
	if err == nil {
		return 200
	}
	return httpStatusOf(status.Code(err))
}

// httpStatusOf maps a gRPC code to an HTTP status.
func httpStatusOf(c codes.Code) int {
	switch c {
	case codes.OK:
		return 200
	case codes.Canceled:
		return 499
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return 400
	case codes.DeadlineExceeded:
		return 504
	case codes.NotFound:
		return 404
	case codes.AlreadyExists, codes.Aborted:
		return 409
	case codes.PermissionDenied:
		return 403
	case codes.Unauthenticated:
		return 401
	case codes.ResourceExhausted:
		return 429
	case codes.Unimplemented:
		return 501
	case codes.Unavailable:
		return 503
	}
	return 500 // Unknown, Internal, DataLoss and codes not defined
}

// quotaSubject returns the QuotaFailure subject of a refusal by the rule
// named rule of the client with key key: "rule:" and the rule's name,
// then " client:" and the key's kind (mwengine.KeyKind: identity, address
// or shared), never the key itself, which may be a secret API key that
// gateways and logs would expose. A proto string must be UTF-8, or no
// detail is sent at all: invalid bytes of the name are replaced by U+FFFD.
func quotaSubject(rule string, key []byte) string {
	s := "rule:" + rule
	if kind := mwengine.KeyKind(key); kind != "" {
		s += " client:" + kind
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
