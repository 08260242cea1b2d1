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
	service.Main(worker.Binary())
}
