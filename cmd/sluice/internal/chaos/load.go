package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// probeKind is the kind of every submitted job: the probe workers' handler
// journals each run (see package journal).
const probeKind = "probe"

// submitOutcome is what one submit got.
type submitOutcome struct {
	ID     string
	Status int
	Limit  string // on a 429: contracts.LimitGlobal, LimitTenant, LimitTenantRate or LimitIPRate
}

// submit posts one probe job of ms milliseconds and the given shape as
// tenant, through the public Go client. A fan-out's items sleep item(i)
// milliseconds each.
func submit(ctx context.Context, hc *http.Client, gw string, tenant Tenant, ms int64, shape jobShape, item func(int) int64) (submitOutcome, error) {
	c, err := client.New(gw, client.WithToken(tenant.Token), client.WithHTTPClient(hc))
	if err != nil {
		return submitOutcome{}, fmt.Errorf("submit: %w", err)
	}
	if shape.Stall {
		ms = max(ms, 4*stallTimeout.Milliseconds())
	}
	payload, err := json.Marshal(map[string]any{"ms": ms, "stall": shape.Stall})
	if err != nil {
		return submitOutcome{}, fmt.Errorf("submit: encode: %w", err)
	}
	req := contracts.SubmitRequest{Kind: probeKind, Payload: payload,
		Priority: shape.Priority, ConcurrencyKey: shape.ConcurrencyKey, ConcurrencyLimit: shape.ConcurrencyLimit,
		StallTimeout: shape.StallTimeout}
	if shape.Resources != "" {
		req.Resources = json.RawMessage(shape.Resources)
	}
	if shape.Items > 0 {
		items := make([]map[string]int64, shape.Items)
		for i := range items {
			items[i] = map[string]int64{"ms": item(i)}
		}
		if req.Items, err = json.Marshal(items); err != nil {
			return submitOutcome{}, fmt.Errorf("submit: encode: %w", err)
		}
		req.Payload, req.Concurrency = nil, shape.Window
	}
	j, created, err := c.Submit(ctx, req)
	var ce *client.Error
	switch {
	case errors.As(err, &ce):
		return submitOutcome{Status: ce.Status, Limit: ce.Limit}, nil
	case err != nil:
		return submitOutcome{}, fmt.Errorf("submit: %w", err)
	case j.ID == "":
		return submitOutcome{}, errors.New("submit: the answer has no job id")
	case j.Tenant != tenant.Name:
		return submitOutcome{}, fmt.Errorf("submit: job %s belongs to %q, submitted as %q", j.ID, j.Tenant, tenant.Name)
	}
	out := submitOutcome{Status: http.StatusOK, ID: j.ID}
	if created {
		out.Status = http.StatusAccepted
	}
	return out, nil
}

// getJSON GETs url as tenant and decodes the body into v.
func getJSON(ctx context.Context, client *http.Client, url string, tenant Tenant, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	req.Header.Set("Authorization", "Bearer "+tenant.Token)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("get %s: decode: %w", url, err)
	}
	return nil
}
