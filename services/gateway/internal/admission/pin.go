package admission

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/sluicehq/sluice/pkg/confine"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// pinRefused is the one answer to a "pin" the gateway will not hash: off,
// outside SLUICE_PIN_ROOTS, missing, unreadable or not a regular file all
// read the same, so that a tenant learns nothing of the gateway's files.
const pinRefused = "cannot pin this file: pinning reads only regular files under the gateway's " +
	"SLUICE_PIN_ROOTS, and this one is not one of them or does not exist"

// Pinner hashes the files a submit pins ("sha256":"pin" on a file://),
// under the operator's roots only, with the request's context and a byte
// bound. Its Run ends every hash under way when the gateway shuts down.
// The zero value is not usable: see NewPinner. A nil *Pinner refuses every
// pin.
type Pinner struct {
	roots    confine.Roots
	maxBytes int64
	stopped  chan struct{}
	stop     sync.Once
}

// NewPinner returns a Pinner reading under roots (none: pinning is off)
// at most maxBytes of one file.
func NewPinner(roots confine.Roots, maxBytes int64) *Pinner {
	return &Pinner{roots: roots, maxBytes: maxBytes, stopped: make(chan struct{})}
}

// Run waits for ctx to end, then stops every hash under way and refuses
// those to come: shutting down never waits on a hash.
func (p *Pinner) Run(ctx context.Context) error {
	<-ctx.Done()
	p.stop.Do(func() { close(p.stopped) })
	return nil
}

// pin replaces every "pin" digest of in with the SHA-256 of the file:// it
// names, read at submit: the job then records which version it runs on.
// A file it may not read is a 422 with the one refusal; a hash cut short
// (client gone, gateway stopping) is a 503.
func (p *Pinner) pin(ctx context.Context, in []contracts.InputRef) ([]contracts.InputRef, *Outcome) {
	for i := range in {
		if in[i].SHA256 != contracts.PinDigest {
			continue
		}
		field := fmt.Sprintf("inputs[%d].sha256", i)
		sum, err := p.hash(ctx, in[i].FilePath())
		switch {
		case err == nil:
			in[i].SHA256 = sum
		case errors.Is(err, confine.ErrTooLarge):
			o := Fail(http.StatusUnprocessableEntity, contracts.CodeValidation, (&contracts.FieldError{Field: field,
				Reason: fmt.Sprintf("cannot pin this file: it is larger than %d bytes (SLUICE_GATEWAY_MAX_PIN_BYTES)", p.maxBytes)}).Error())
			return nil, &o
		case errors.Is(err, errStopping) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			o := Fail(http.StatusServiceUnavailable, contracts.CodeUnavailable, "the pin was stopped before the file was read, try again")
			o.Cause = fmt.Errorf("pin %s: %w", field, err)
			return nil, &o
		default:
			o := Fail(http.StatusUnprocessableEntity, contracts.CodeValidation,
				(&contracts.FieldError{Field: field, Reason: pinRefused}).Error())
			return nil, &o
		}
	}
	return in, nil
}

// errStopping is a hash cut short because the gateway is shutting down.
var errStopping = errors.New("the gateway is shutting down")

// hash is the SHA-256 of the regular file path under the roots, in hex.
func (p *Pinner) hash(ctx context.Context, path string) (string, error) {
	if p == nil || p.roots.Empty() {
		return "", confine.ErrRefused
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() { // ends with the hash at the latest (the deferred cancel)
		select {
		case <-p.stopped:
			cancel(errStopping)
		case <-ctx.Done():
		}
	}()
	h := sha256.New()
	if _, err := p.roots.Copy(ctx, path, h, p.maxBytes); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return "", cause
		}
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
