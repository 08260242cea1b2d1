module github.com/sluicehq/sluice/examples/embedded-worker

go 1.26.0

require (
	github.com/nats-io/nats.go v1.55.0
	github.com/sluicehq/sluice/pkg/client v0.0.0
	github.com/sluicehq/sluice/pkg/contracts v0.0.0
	github.com/sluicehq/sluice/services/worker v0.0.0
)

require (
	github.com/antithesishq/antithesis-sdk-go v0.8.0-default-no-op // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/caarlos0/env/v11 v11.4.2 // indirect
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/nats-io/jwt/v2 v2.8.2 // indirect
	github.com/nats-io/nats-server/v2 v2.15.2 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/rs/zerolog v1.35.1 // indirect
	github.com/sluicehq/sluice/pkg/bus v0.0.0 // indirect
	github.com/sluicehq/sluice/pkg/confine v0.0.0 // indirect
	github.com/sluicehq/sluice/pkg/observe v0.0.0 // indirect
	github.com/sluicehq/sluice/pkg/service v0.0.0 // indirect
	github.com/sluicehq/sluice/pkg/store v0.0.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// Nothing is published yet: every Sluice module comes from this checkout.
// With a tagged release, drop these lines and require that release instead
// (see README.md).
replace (
	github.com/sluicehq/sluice/pkg/bus => ../../pkg/bus
	github.com/sluicehq/sluice/pkg/client => ../../pkg/client
	github.com/sluicehq/sluice/pkg/confine => ../../pkg/confine
	github.com/sluicehq/sluice/pkg/contracts => ../../pkg/contracts
	github.com/sluicehq/sluice/pkg/observe => ../../pkg/observe
	github.com/sluicehq/sluice/pkg/service => ../../pkg/service
	github.com/sluicehq/sluice/pkg/store => ../../pkg/store
	github.com/sluicehq/sluice/services/worker => ../../services/worker
)
