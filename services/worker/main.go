// Command worker runs a Sluice worker: it announces itself on NATS, takes
// the jobs the scheduler offers up to its limit, and exits by itself after
// its idle timeout or max lifetime. Configuration comes from SLUICE_*
// environment variables (see worker.Config).
package main

import (
	"github.com/sluicehq/sluice/pkg/service"
	"github.com/sluicehq/sluice/services/worker/worker"
)

func main() {
	service.Main(service.Binary[worker.Config]{
		Name:   "worker",
		Load:   worker.LoadConfig,
		Common: worker.Config.Common,
		Build: func(cfg worker.Config, d service.Deps) (service.Runner, error) {
			return worker.New(cfg, worker.Deps{NC: d.NC, JS: d.JS, Log: d.Log, Registry: d.Registry})
		},
	})
}
