package admission

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/confine"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/internal/ratelimit"
)

// pinRefused is the one answer to a "pin" the gateway will not hash: off,
// outside SLUICE_PIN_ROOTS, missing, unreadable or not a regular file all
// read the same, so that a tenant learns nothing of the gateway's files.
const pinRefused = "cannot pin this file: pinning reads only regular files under the gateway's " +
	"SLUICE_PIN_ROOTS, and this one is not one of them or does not exist"

// PinLimits bound what pinning may cost the gateway: the bytes of one
// file, the hashes under way (in all and per tenant), the bytes per
// second one tenant's hashes read, and the digests kept.
type PinLimits struct {
	// MaxBytes is the most bytes read to pin one file.
	MaxBytes int64
	// MaxPins is how many files are hashed at once (at least 1); past it
	// a pin that must read its file is refused with 503.
	MaxPins int
	// TenantMaxPins is how many of them may be one tenant's (at least 1,
	// at most MaxPins); past it a pin that must read its file is refused
	// with 429, limit tenant_pins.
	TenantMaxPins int
	// Rate is the bytes per second one tenant's hashes read together,
	// Burst how many they read before the rate paces them (Rate 0: not
	// paced).
	Rate  float64
	Burst int
	// CacheEntries bounds the digests kept (0: none kept, every pin
	// reads its file).
	CacheEntries int
	// RetryAfter is what a pin refused for want of room is told to wait.
	RetryAfter time.Duration
}

// pinFile is a file opened to pin: stat, read, close. *os.File is one.
type pinFile interface {
	io.ReadCloser
	Stat() (fs.FileInfo, error)
}

// Pinner hashes the files a submit pins ("sha256":"pin" on a file://),
// under the operator's roots only, with the request's context and a byte
// bound, within the limits of PinLimits: a file unchanged since it was
// last hashed costs a stat (its digest is reused); one that must be read
// takes a place among the hashes under way (its tenant's share, then the
// gateway's) and is read no faster than its tenant's byte rate. Its Run
// ends every hash under way when the gateway shuts down. The zero value is
// not usable: see NewPinner. A nil *Pinner refuses every pin.
type Pinner struct {
	roots confine.Roots
	lim   PinLimits
	// hashing holds a place per hash under way, per tenant and in all.
	hashing *ratelimit.Pool
	// rate paces each tenant's reads (nil: not paced).
	rate *ratelimit.Limiter
	// digests are the digests of files hashed before (see digestCache).
	digests *digestCache
	now     func() time.Time
	// open opens a file to pin under the roots, and says its real path.
	open func(path string) (pinFile, string, error)
	// sleep waits d, or less when ctx ends first (with its error).
	sleep func(ctx context.Context, d time.Duration) error

	stopped chan struct{}
	stop    sync.Once
}

// NewPinner returns a Pinner reading under roots (none: pinning is off)
// within lim, on the clock now (nil: time.Now).
func NewPinner(roots confine.Roots, lim PinLimits, now func() time.Time) *Pinner {
	if now == nil {
		now = time.Now
	}
	lim.MaxPins = max(lim.MaxPins, 1)
	lim.TenantMaxPins = min(max(lim.TenantMaxPins, 1), lim.MaxPins)
	return &Pinner{
		roots:   roots,
		lim:     lim,
		hashing: ratelimit.NewPool(lim.MaxPins, lim.TenantMaxPins),
		rate:    ratelimit.New(lim.Rate, lim.Burst, ratelimit.Options{Now: now}),
		digests: newDigestCache(lim.CacheEntries),
		now:     now,
		open: func(path string) (pinFile, string, error) {
			return roots.OpenResolved(path)
		},
		sleep:   sleepCtx,
		stopped: make(chan struct{}),
	}
}

// sleepCtx waits d or until ctx ends, then returns ctx's error.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run waits for ctx to end, then stops every hash under way and refuses
// those to come: shutting down never waits on a hash.
func (p *Pinner) Run(ctx context.Context) error {
	<-ctx.Done()
	p.stop.Do(func() { close(p.stopped) })
	return nil
}

// Errors of a hash that did not end with a digest.
var (
	// errStopping is a hash cut short because the gateway is shutting
	// down.
	errStopping = errors.New("the gateway is shutting down")
	// errTenantPins: the tenant already has its share of hashes under
	// way.
	errTenantPins = errors.New("the tenant's share of pins under way is taken")
	// errMaxPins: the gateway already hashes as many files as it may.
	errMaxPins = errors.New("every place for a pin under way is taken")
)

// pin replaces every "pin" digest of in with the SHA-256 of the file:// it
// names, read at submit for tenant: the job then records which version it
// runs on. A file it may not read is a 422 with the one refusal; a pin
// past the tenant's share of hashes under way a 429 naming tenant_pins,
// past the gateway's a 503, both with a Retry-After; a hash cut short
// (client gone, gateway stopping) is a 503.
func (p *Pinner) pin(ctx context.Context, tenant string, in []contracts.InputRef) ([]contracts.InputRef, *Outcome) {
	for i := range in {
		if in[i].SHA256 != contracts.PinDigest {
			continue
		}
		field := fmt.Sprintf("inputs[%d].sha256", i)
		sum, err := p.hash(ctx, tenant, in[i].FilePath())
		switch {
		case err == nil:
			in[i].SHA256 = sum
		case errors.Is(err, confine.ErrTooLarge):
			o := Fail(http.StatusUnprocessableEntity, contracts.CodeValidation, (&contracts.FieldError{Field: field,
				Reason: fmt.Sprintf("cannot pin this file: it is larger than %d bytes (SLUICE_GATEWAY_MAX_PIN_BYTES)", p.lim.MaxBytes)}).Error())
			return nil, &o
		case errors.Is(err, errTenantPins):
			o := Fail(http.StatusTooManyRequests, contracts.CodeTenantCap, fmt.Sprintf(
				"cannot pin inputs[%d] now: this tenant already has %d files being hashed, its share (SLUICE_GATEWAY_TENANT_MAX_PINS); retry after %d ms",
				i, p.lim.TenantMaxPins, max(p.lim.RetryAfter.Milliseconds(), 1)))
			o.Error.Limit = contracts.LimitTenantPins
			o.RetryAfter = p.lim.RetryAfter
			return nil, &o
		case errors.Is(err, errMaxPins):
			o := Fail(http.StatusServiceUnavailable, contracts.CodeUnavailable,
				fmt.Sprintf("cannot pin inputs[%d] now: the gateway is hashing as many files as it may, try again", i))
			o.RetryAfter = p.lim.RetryAfter
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

// hash is the SHA-256 of the regular file path under the roots, in hex:
// the digest kept from an earlier hash while the file's stamp has not
// changed, otherwise read within tenant's shares.
func (p *Pinner) hash(ctx context.Context, tenant, path string) (string, error) {
	if p == nil || p.roots.Empty() {
		return "", confine.ErrRefused
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	f, real, err := p.open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "", confine.ErrRefused
	}
	before, trusted := confine.StampOf(info)
	if sum, ok := p.digests.get(real, before); ok && trusted {
		return sum, nil
	}
	switch p.hashing.Take(tenant) {
	case ratelimit.PoolKeyFull:
		return "", errTenantPins
	case ratelimit.PoolFull:
		return "", errMaxPins
	}
	defer p.hashing.Release(tenant)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() { // ends with the hash at the latest (the deferred cancel)
		select {
		case <-p.stopped:
			cancel(errStopping)
		case <-ctx.Done():
		}
	}()
	started := p.now()
	h := sha256.New()
	paced := writerFunc(func(b []byte) (int, error) {
		if err := p.pace(ctx, tenant, len(b)); err != nil {
			return 0, err
		}
		return h.Write(b)
	})
	if _, err := confine.Read(ctx, f, paced, p.lim.MaxBytes); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return "", cause
		}
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	// Kept only if the file did not change while it was read, and its
	// last change is old enough that a change within the same tick of
	// the file system's clock cannot hide behind its stamp.
	if info, err := f.Stat(); err == nil && trusted {
		if after, _ := confine.StampOf(info); after == before && after.Settled(started) {
			p.digests.put(real, after, sum)
		}
	}
	return sum, nil
}

// minPause is the shortest wait the pacing sleeps: shorter ones are
// owed to the bucket and slept with the next, which spares a timer per
// 64 KiB read at the cost of reading at most this long ahead of the rate.
const minPause = 5 * time.Millisecond

// pace takes n bytes from tenant's bucket and waits until the bucket
// holds them, or until ctx ends (with its error): the hash then reads no
// faster than the tenant's byte rate.
func (p *Pinner) pace(ctx context.Context, tenant string, n int) error {
	if wait := p.rate.Reserve(tenant, n); wait >= minPause {
		return p.sleep(ctx, wait)
	}
	return nil
}

// writerFunc is a function as an io.Writer.
type writerFunc func(b []byte) (int, error)

// Write calls f.
func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
