// Command scheduler runs one Sluice scheduler replica: it dispatches due
// jobs to workers and applies their results, heartbeats and requeues.
// Configuration comes from SLUICE_* environment variables (see
// scheduler.Config).
package main

import (
	"github.com/sluicehq/sluice/pkg/service"
	"github.com/sluicehq/sluice/services/scheduler/scheduler"
)

func main() {
	service.Main(service.Binary[scheduler.Config]{
		Name:   "scheduler",
		Load:   scheduler.LoadConfig,
		Common: scheduler.Config.Common,
		Build: func(cfg scheduler.Config, d service.Deps) (service.Runner, error) {
			return scheduler.New(cfg, scheduler.Deps{Store: d.Store, NC: d.NC, JS: d.JS, Log: d.Log, Registry: d.Registry})
		},
	})
}
