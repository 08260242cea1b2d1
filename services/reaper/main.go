// Command reaper runs the Sluice reaper: it recovers stale and timed-out jobs,
// enforces the hard max runtime, purges old finished jobs and repairs
// admission counters. Configuration comes from SLUICE_* environment
// variables (see reaper.Config).
package main

import (
	"github.com/sluicehq/sluice/pkg/service"
	"github.com/sluicehq/sluice/services/reaper/reaper"
)

func main() {
	service.Main(service.Binary[reaper.Config]{
		Name:   "reaper",
		Load:   reaper.LoadConfig,
		Common: reaper.Config.Common,
		Build: func(cfg reaper.Config, d service.Deps) (service.Runner, error) {
			return reaper.New(cfg, reaper.Deps{Store: d.Store, NC: d.NC, JS: d.JS, Log: d.Log, Registry: d.Registry})
		},
	})
}
