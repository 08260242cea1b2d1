package contracts

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Pinned inputs: a job may name up to MaxInputs files its run needs, each
// pinned by its SHA-256 digest. The worker fetches each before the handler
// starts, checks the digest while it streams, and hands each run a
// read-only copy of its own (exec: SLUICE_INPUT_<NAME>).

// Bounds of inputs.
const (
	// MaxInputs bounds the inputs of one job.
	MaxInputs = 32
	// PinDigest as an input's sha256 asks the gateway to hash the file
	// (file:// only) and pin what it read.
	PinDigest = "pin"
)

var (
	inputNameRE = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)
	sha256RE    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// InputRef is one pinned input of a job.
type InputRef struct {
	// Name is how the handler finds it: [a-z0-9_]{1,32}.
	Name string `json:"name"`
	// URI is where it is fetched from: file:///… or http(s)://….
	URI string `json:"uri"`
	// SHA256 is the digest of its content, lower-case hex: the pin.
	SHA256 string `json:"sha256"`
	// Version is a label for people (optional).
	Version string `json:"version,omitempty"`
}

// EnvName is the variable that tells an exec job the input's local path.
func (r InputRef) EnvName() string { return "SLUICE_INPUT_" + strings.ToUpper(r.Name) }

// FilePath is the local path of a file:// input ("" for other schemes).
func (r InputRef) FilePath() string {
	u, err := url.Parse(r.URI)
	if err != nil || u.Scheme != "file" {
		return ""
	}
	return u.Path
}

// validateInputs checks a request's inputs; a digest of PinDigest is kept
// for the gateway to replace. Its errors are *FieldError.
func validateInputs(in []InputRef) ([]InputRef, error) {
	if len(in) == 0 {
		return nil, nil
	}
	if len(in) > MaxInputs {
		return nil, &FieldError{"inputs", fmt.Sprintf("has %d inputs, at most %d", len(in), MaxInputs)}
	}
	seen := map[string]bool{}
	out := make([]InputRef, len(in))
	for i, r := range in {
		field := fmt.Sprintf("inputs[%d]", i)
		switch {
		case !inputNameRE.MatchString(r.Name):
			return nil, &FieldError{field + ".name", "must be 1-32 lowercase letters, digits or '_'"}
		case seen[r.Name]:
			return nil, &FieldError{field + ".name", fmt.Sprintf("%q is given twice", r.Name)}
		case len(r.URI) > 2048 || !printable(r.URI):
			return nil, &FieldError{field + ".uri", "must be printable and at most 2048 bytes"}
		case len(r.Version) > 128 || !printable(r.Version):
			return nil, &FieldError{field + ".version", "must be printable and at most 128 bytes"}
		}
		seen[r.Name] = true
		u, err := url.Parse(r.URI)
		if err != nil {
			return nil, &FieldError{field + ".uri", "is not a URI"}
		}
		switch {
		case u.Scheme == "file" && u.Path != "" && (u.Host == "" || u.Host == "localhost"):
		case (u.Scheme == "http" || u.Scheme == "https") && u.Host != "":
		default:
			return nil, &FieldError{field + ".uri", "must be file:///path or http(s)://host/…"}
		}
		switch {
		case r.SHA256 == PinDigest && u.Scheme != "file":
			return nil, &FieldError{field + ".sha256", `"pin" works on file:// inputs only`}
		case r.SHA256 != PinDigest && !sha256RE.MatchString(r.SHA256):
			return nil, &FieldError{field + ".sha256", `is required: 64 lower-case hex digits (or "pin" for a file:// input)`}
		}
		out[i] = r
	}
	return out, nil
}
