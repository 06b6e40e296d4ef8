package gittest

import (
	"fmt"
	"os"
)

// Standalone lets a program that is not a test (the quickstart, the
// benchmarks) use the helpers: Fatalf panics with a [Failure] that
// [Standalone.Recover] turns back into an error, and Close runs the
// cleanups, removing the temporary directories.
type Standalone struct{ cleanups []func() }

var _ TB = (*Standalone)(nil)

// Failure is what Standalone.Fatalf panics with.
type Failure string

func (f Failure) Error() string { return string(f) }

// Helper implements TB.
func (s *Standalone) Helper() {}

// Fatalf implements TB by panicking with a Failure.
func (s *Standalone) Fatalf(format string, args ...any) {
	panic(Failure(fmt.Sprintf(format, args...)))
}

// TempDir implements TB: a new directory, removed by Close.
func (s *Standalone) TempDir() string {
	d, err := os.MkdirTemp("", "modwatch-")
	if err != nil {
		s.Fatalf("gittest: %v", err)
	}
	s.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// Cleanup implements TB.
func (s *Standalone) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

// Close runs the cleanups, last first.
func (s *Standalone) Close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
}

// Recover turns a Failure panic into *err; use it as
// `defer env.Recover(&err)`. Other panics go on.
func (s *Standalone) Recover(err *error) {
	if r := recover(); r != nil {
		f, ok := r.(Failure)
		if !ok {
			panic(r)
		}
		*err = f
	}
}
