package procgroup

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// An Output cut while written to keeps its last bytes across the cut; it
// leaves no file behind, and what holds it still holds nothing after its
// Close.
func TestOutputKeepsItsTailAcrossACut(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	o, err := NewOutput(8)
	require.NoError(t, err)
	defer o.Close()
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "the file has no name")

	w, err := os.OpenFile(fmt.Sprint("/proc/self/fd/", o.File().Fd()), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.WriteString("hello")
	require.NoError(t, err)
	assert.Equal(t, "hello", o.Tail(), "less than keep: all of it")
	_, err = w.WriteString(strings.Repeat("x", maxFile) + "12345678")
	require.NoError(t, err)
	require.Eventually(t, func() bool { fi, err := o.File().Stat(); return err == nil && fi.Size() == 0 }, 30*time.Second, time.Millisecond, "the file is cut")
	assert.Equal(t, "12345678", o.Tail(), "the last bytes, from before the cut")
	_, err = w.WriteString("abc")
	require.NoError(t, err)
	assert.Equal(t, "45678abc", o.Tail(), "the last bytes, from both sides of the cut")

	require.NoError(t, o.Close())
	_, err = w.WriteString("more")
	require.NoError(t, err)
	fi, err := w.Stat()
	require.NoError(t, err)
	assert.Equal(t, int64(4), fi.Size(), "emptied on Close")
}
