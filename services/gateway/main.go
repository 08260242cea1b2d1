// Command gateway runs Sluice's gateway: the HTTP API v1 and the NATS
// submit endpoint in front of the job store. Configuration comes from
// SLUICE_* environment variables (see gateway.Config).
package main

import (
	"github.com/sluicehq/sluice/pkg/service"
	"github.com/sluicehq/sluice/services/gateway/gateway"
)

func main() {
	service.Main(service.Binary[gateway.Config]{
		Name:   "gateway",
		Load:   gateway.LoadConfig,
		Common: gateway.Config.Common,
		Build: func(cfg gateway.Config, d service.Deps) (service.Runner, error) {
			return gateway.New(cfg, gateway.Deps{Store: d.Store, NC: d.NC, JS: d.JS, Log: d.Log, Registry: d.Registry})
		},
	})
}
