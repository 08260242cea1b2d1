// Package service is the body of every Sluice service binary. Main reads
// the service's configuration from the environment, builds the logger,
// opens the store (when the service has one) and the NATS connection,
// retrying with backoff while they are down, builds the service from them
// and runs it until SIGINT or SIGTERM; the service then drains within its
// own SLUICE_SHUTDOWN_TIMEOUT. Each services/<name>/main.go is one call:
//
//	func main() {
//		service.Main(service.Binary[scheduler.Config]{
//			Name:   "scheduler",
//			Load:   scheduler.LoadConfig,
//			Common: scheduler.Config.Common,
//			Build: func(c scheduler.Config, d service.Deps) (service.Runner, error) {
//				return scheduler.New(c, scheduler.Deps{Store: d.Store, NC: d.NC, JS: d.JS, Log: d.Log, Registry: d.Registry})
//			},
//		})
//	}
package service
