//go:build containers

package mongo

// The same tests against a real MongoDB 7 replica set in a container, when
// Docker is available:
//
//	go test -tags containers -race -count=1 ./pkg/store/mongo/...
//
// Without Docker the tests skip with the reason. They are behind the
// "containers" build tag so that `make test` does not even compile them.

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcmongo "github.com/testcontainers/testcontainers-go/modules/mongodb"

	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// mongoImage is the server the driver is proven against.
const mongoImage = "mongo:7"

// mongoServer starts a single-node mongo:7 replica set for t, or skips t
// when there is no Docker to run it.
func mongoServer(t *testing.T) server {
	t.Helper()
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c, err := tcmongo.Run(ctx, mongoImage, tcmongo.WithReplicaSet("rs0"))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("start %s: %v", mongoImage, err)
	}
	raw, err := c.ConnectionString(ctx)
	if err != nil {
		t.Fatalf("connection string of %s: %v", mongoImage, err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("connection string %q: %v", raw, err)
	}
	// The member announces the container's own address; talk to the
	// mapped port directly. It is still a replica set primary: majority
	// writes, retryable writes and all.
	q := u.Query()
	q.Del("replicaSet")
	q.Set("directConnection", "true")
	u.RawQuery = q.Encode()
	return func(db string) string {
		v := *u
		v.Path = "/" + db
		return v.String()
	}
}

// requireDocker skips t, in one line, when no Docker engine answers.
func requireDocker(t *testing.T) {
	t.Helper()
	skip := func(reason any) { t.Skipf("docker not available: %v", reason) }
	defer func() {
		if r := recover(); r != nil {
			skip(r)
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		skip(err)
	}
	defer func() { _ = p.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.Health(ctx); err != nil {
		skip(err)
	}
}

func TestMongo7Conformance(t *testing.T) {
	fresh := freshDatabase(mongoServer(t))
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, fresh())
	})
}

func TestMongo7Driver(t *testing.T) {
	runDriverTests(t, mongoServer(t))
}
