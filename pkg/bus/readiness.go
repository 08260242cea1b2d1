package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Check reports whether the connection is up and the job stream answers:
// the readiness probe of every service that uses JetStream.
func Check(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	if nc == nil || !nc.IsConnected() {
		return errors.New("nats: not connected")
	}
	if js == nil {
		return nil
	}
	if _, err := js.Stream(ctx, contracts.StreamName); err != nil {
		return fmt.Errorf("nats: stream %s: %w", contracts.StreamName, err)
	}
	return nil
}
