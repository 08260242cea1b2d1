package sandbox

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind (a warden's
// reader outliving its Close, say).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
