// Package eventid turns the sequences of the event stream into the event
// ids a tenant sees (the Server-Sent Events "id:" fields, Last-Event-ID,
// ?since=) and back.
//
// A sequence numbers every event of every tenant in one series, so as an
// id it would tell a tenant how many events the others caused: between two
// of its own events, since its last visit, in all. An id is instead the
// sequence and a tag of the tenant, encrypted as one AES block under a key
// every gateway of the deployment derives alike (from the configured
// tokens, see auth.Authenticator.Key): 22 URL-safe base64 characters that
// neither reveal nor order anything, and that another tenant, or anyone
// without the key, can neither read nor make. A tenant can use an id only
// to resume its own streams after it.
package eventid

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
)

// KeySize is the size of a Codec's key (AES-256).
const KeySize = 32

// idLen is the length of an id: 16 bytes in unpadded URL-safe base64.
var idLen = base64.RawURLEncoding.EncodedLen(aes.BlockSize)

// Codec makes and reads event ids. It is safe for concurrent use.
type Codec struct {
	block cipher.Block
}

// New returns a Codec with key.
func New(key [KeySize]byte) *Codec {
	b, err := aes.NewCipher(key[:])
	if err != nil {
		panic("eventid: " + err.Error()) // never: every 32-byte key is an AES-256 key
	}
	return &Codec{block: b}
}

// tag is the half of an id's block that names its tenant.
func tag(tenant string) [8]byte {
	sum := sha256.Sum256([]byte("sluice event id tenant\x00" + tenant))
	return [8]byte(sum[:8])
}

// ID is tenant's id of the event at stream sequence seq.
func (c *Codec) ID(tenant string, seq uint64) string {
	var b [aes.BlockSize]byte
	t := tag(tenant)
	copy(b[:8], t[:])
	binary.BigEndian.PutUint64(b[8:], seq)
	c.block.Encrypt(b[:], b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Seq reads an id ID made for tenant: its sequence, or false for anything
// else (another tenant's id, another deployment's, a number, garbage).
func (c *Codec) Seq(tenant, id string) (uint64, bool) {
	if len(id) != idLen {
		return 0, false
	}
	var b [aes.BlockSize]byte
	if n, err := base64.RawURLEncoding.Strict().Decode(b[:], []byte(id)); err != nil || n != aes.BlockSize {
		return 0, false
	}
	c.block.Decrypt(b[:], b[:])
	if t := tag(tenant); [8]byte(b[:8]) != t {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[8:]), true
}
