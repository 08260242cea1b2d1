package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestLineDisplaySkipsRepeats(t *testing.T) {
	t.Parallel()
	var out, errw bytes.Buffer
	d := newLineDisplay(&out, &errw, false)
	pending := testJob(contracts.StatePending)
	d.update(Update{Event: snapshotEvent(pending), Job: pending})
	d.update(Update{Event: contracts.StateEvent(pending), Job: pending}) // the same, as a state event
	running := testJob(contracts.StateRunning)
	d.update(Update{Event: contracts.StateEvent(running), Job: running})
	running.Progress = &contracts.Progress{Percent: 10}
	d.update(Update{Event: snapshotEvent(running), Job: running})
	d.update(Update{Event: contracts.Event{Type: contracts.EventProgress, JobID: testID, Claim: 1, Progress: running.Progress}, Job: running})
	d.note("the event stream dropped; reconnecting")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, "a progress event the snapshot line showed is skipped: %q", out.String())
	require.Contains(t, lines[2], "running    attempt 1/3  claim 1  on worker-01  10%")
	require.Contains(t, lines[0], "pending")
	require.Contains(t, lines[1], "running")
	require.Equal(t, "sluice: the event stream dropped; reconnecting\n", errw.String())
}

func TestLineDisplayWithJob(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	d := newLineDisplay(&out, &out, true)
	ev := contracts.StateEvent(testJob(contracts.StateRunning))
	d.update(Update{Event: ev})
	require.Regexp(t, `^\d\d:\d\d:\d\d  `+testID+`  sleep       running    claim 1  on worker-01\n$`, out.String())
}

func TestBarDisplay(t *testing.T) {
	t.Parallel()
	var out, errw bytes.Buffer
	now := func() time.Time { return testTime.Add(3 * time.Second) }
	d := newBarDisplay(&out, &errw, func() int { return 40 }, now)
	running := testJob(contracts.StateRunning)
	d.update(Update{Event: contracts.StateEvent(running), Job: running})
	running.Progress = &contracts.Progress{Percent: 50, Stage: "a very long stage name", Message: "that does not fit"}
	d.update(Update{Event: contracts.Event{Type: contracts.EventProgress, JobID: testID, Claim: 1, Progress: running.Progress}, Job: running})
	d.note("hello")
	d.finish(testJob(contracts.StateSucceeded))
	d.finish(testJob(contracts.StateSucceeded)) // twice is harmless
	d.stop()

	text := out.String()
	require.Contains(t, text, "running    attempt 1/3  claim 1  on worker-01\n", "state changes are lines above the bar")
	frames := 0
	for _, frame := range strings.Split(text, "\r\x1b[K") {
		if frame == "" || strings.Contains(frame, "\n") {
			continue // a line printed above the bar
		}
		frames++
		require.LessOrEqual(t, len([]rune(frame)), 39, "a frame is cut to the terminal's width: %q", frame)
	}
	require.GreaterOrEqual(t, frames, 2)
	require.Contains(t, text, "[############------------]  50%  a ver…")
	require.True(t, strings.HasSuffix(text, "\r\x1b[K"+fmtClock(testTime.Add(2*time.Second))+"  succeeded  attempt 1/3  claim 1  on worker-01  ran 2.0s\n"), "%q", text)
	require.Equal(t, 1, strings.Count(text, "succeeded"))
	require.Equal(t, "sluice: hello\n", errw.String())
}
