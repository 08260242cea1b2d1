package envconfig

import (
	"errors"
	"fmt"
)

// Problems gathers what is wrong with a configuration, every problem
// naming its variable ("SLUICE_X: must be positive, got 0s"). Every
// service's Validate is written with it, so the errors read alike:
//
//	var p envconfig.Problems
//	envconfig.Positive(&p, "SLUICE_X", c.X)
//	p.Add("SLUICE_Y", "%q is not a valid kind", c.Y)
//	return p.Err()
//
// The zero value is ready to use.
type Problems struct {
	errs []error
}

// Add records a problem with variable, described by format and args.
func (p *Problems) Add(variable, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s", variable, fmt.Sprintf(format, args...)))
}

// Wrap records err, when not nil, as a problem with variable.
func (p *Problems) Wrap(variable string, err error) {
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s: %w", variable, err))
	}
}

// Include records err, when not nil, as it is: the error of a Validate
// that names its variables already (a shared part of the Config).
func (p *Problems) Include(err error) {
	if err != nil {
		p.errs = append(p.errs, err)
	}
}

// Err joins the problems recorded, or is nil when there are none.
func (p *Problems) Err() error {
	return errors.Join(p.errs...)
}

// number is what the bound checks compare: counts, sizes, rates and
// durations (time.Duration is an int64).
type number interface {
	~int | ~int32 | ~int64 | ~float64
}

// Positive records a problem unless v > 0.
func Positive[T number](p *Problems, variable string, v T) {
	if !(v > 0) {
		p.Add(variable, "must be positive, got %v", v)
	}
}

// NotNegative records a problem when v < 0; zero says what 0 means
// ("off", "no limit", "never"), for the message.
func NotNegative[T number](p *Problems, variable string, v T, zero string) {
	if !(v >= 0) {
		p.Add(variable, "must not be negative (0 = %s), got %v", zero, v)
	}
}

// Between records a problem unless lo <= v <= hi.
func Between[T number](p *Problems, variable string, v, lo, hi T) {
	if !(v >= lo && v <= hi) {
		p.Add(variable, "must be between %v and %v, got %v", lo, hi, v)
	}
}
