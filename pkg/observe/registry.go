package observe

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewRegistry returns the metrics registry a service binary serves on
// /metrics: empty but for the Go runtime and process collectors. Every
// service takes a *prometheus.Registry in its Deps and makes one of these
// when it is given none; several services in one process may share one.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
