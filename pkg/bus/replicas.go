package bus

import "github.com/nats-io/nats.go/jetstream"

// replicated is a JetStream context whose streams are created with n
// replicas (SLUICE_STREAM_REPLICAS). The count travels with the context
// so that every place that creates a stream, when it is missing at start
// or after it was lost, creates it the same way.
type replicated struct {
	jetstream.JetStream
	n int
}

// WithReplicas returns js creating streams with n replicas (EnsureStream,
// EnsureStreamConfig); n <= 1 returns js as it is.
func WithReplicas(js jetstream.JetStream, n int) jetstream.JetStream {
	if n <= 1 {
		return js
	}
	if r, ok := js.(replicated); ok {
		js = r.JetStream
	}
	return replicated{JetStream: js, n: n}
}

// Replicas is the number of replicas streams created through js get: 1
// unless js came from WithReplicas.
func Replicas(js jetstream.JetStream) int {
	if r, ok := js.(replicated); ok {
		return r.n
	}
	return 1
}
