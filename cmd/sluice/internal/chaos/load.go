package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

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

// submit posts one probe job of ms milliseconds as tenant.
func submit(ctx context.Context, client *http.Client, gw string, tenant Tenant, ms int64) (submitOutcome, error) {
	body, err := json.Marshal(map[string]any{"kind": probeKind, "payload": map[string]int64{"ms": ms}})
	if err != nil {
		return submitOutcome{}, fmt.Errorf("submit: encode: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw+"/v1/jobs", bytes.NewReader(body))
	if err != nil {
		return submitOutcome{}, fmt.Errorf("submit: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tenant.Token)
	resp, err := client.Do(req)
	if err != nil {
		return submitOutcome{}, fmt.Errorf("submit: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	out := submitOutcome{Status: resp.StatusCode}
	if err != nil {
		return out, fmt.Errorf("submit: read body: %w", err)
	}
	switch {
	case resp.StatusCode/100 == 2:
		var j contracts.Job
		if err := json.Unmarshal(data, &j); err != nil || j.ID == "" {
			return out, fmt.Errorf("submit: bad body %q", data)
		}
		if j.Tenant != tenant.Name {
			return out, fmt.Errorf("submit: job %s belongs to %q, submitted as %q", j.ID, j.Tenant, tenant.Name)
		}
		out.ID = j.ID
	case resp.StatusCode == http.StatusTooManyRequests:
		var e contracts.ErrorBody
		if json.Unmarshal(data, &e) == nil {
			out.Limit = e.Error.Limit
		}
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
