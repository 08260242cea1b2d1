// Package observe gives every Sluice service the same logs and the same
// operational HTTP endpoints: zerolog JSON logs with consistent fields, and
// /healthz, /readyz and /metrics.
package observe
