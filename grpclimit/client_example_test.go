package grpclimit_test

import (
	"context"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/grpclimit"
	"github.com/shardlimit/shardlimit/outbound"
)

// A client that keeps each method of a server under 100 calls per minute,
// waiting for its turn, and waits as long as the server's RetryInfo asks
// after a ResourceExhausted.
func ExampleNewClient() {
	lim, err := shardlimit.New(shardlimit.Config{
		Algorithm: shardlimit.SlidingLog, // exact: never more than 100 in any minute
		Limit:     100,
		Window:    time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	pacer, err := outbound.New(outbound.Config{Limiter: lim}) // FailFast: true fails instead of waiting
	if err != nil {
		log.Fatal(err)
	}
	client, err := grpclimit.NewClient(grpclimit.ClientConfig{
		Pacer: pacer,
		Key:   grpclimit.KeyByMethod, // the default; KeyByTarget: one budget per server
	})
	if err != nil {
		log.Fatal(err)
	}
	cc, err := grpc.NewClient("127.0.0.1:50051",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(client.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(client.StreamClientInterceptor()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hc := healthpb.NewHealthClient(cc)
	for range 300 { // 100 at once, then one about every 0.6 s
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if status.Code(err) == codes.ResourceExhausted {
			// the server's limit, or the pacer's (errors.Is(err, outbound.ErrLimited));
			// the next call on this method waits for the RetryInfo delay
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
	}
}
