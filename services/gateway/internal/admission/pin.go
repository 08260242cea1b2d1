package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// maxPinBytes bounds a file the gateway hashes to pin an input.
const maxPinBytes = 16 << 30

// pinInputs replaces every "pin" digest with the SHA-256 of the file:// it
// names, read by the gateway at submit: the job then records which version
// it runs on. A file the gateway cannot read is a *FieldError.
func pinInputs(in []contracts.InputRef) ([]contracts.InputRef, error) {
	for i := range in {
		if in[i].SHA256 != contracts.PinDigest {
			continue
		}
		sum, err := hashFile(in[i].FilePath())
		if err != nil {
			return nil, &contracts.FieldError{Field: fmt.Sprintf("inputs[%d].sha256", i),
				Reason: fmt.Sprintf("cannot pin %s: %v", in[i].URI, err)}
		}
		in[i].SHA256 = sum
	}
	return in, nil
}

// hashFile is the SHA-256 of a regular file's content, in hex.
func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("the gateway cannot read it: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	switch {
	case err != nil:
		return "", err
	case !info.Mode().IsRegular():
		return "", fmt.Errorf("not a regular file")
	case info.Size() > maxPinBytes:
		return "", fmt.Errorf("larger than %d bytes", int64(maxPinBytes))
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
