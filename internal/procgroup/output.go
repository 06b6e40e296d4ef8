// Package procgroup runs a command that may start others, so that none of
// them outlives it or holds up the wait for it: [Run] makes the command
// the leader of a process group of its own and kills the group, on the
// end of a context and after the command exits; [Output] is a file for
// the command's output, which a process that keeps it open cannot make
// anyone wait for, as a pipe's reader waits for its last writer.
package procgroup

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// maxFile bounds the size of an Output's file on disk while the command
// runs: past it, all but the last bytes kept are dropped.
const maxFile = 1 << 20

// trimEvery is how often an Output's file is checked against maxFile.
const trimEvery = 20 * time.Millisecond

// Output is where a command writes (stdout and stderr both): a temporary
// file, unlinked as soon as it is made, so that nothing is left of it
// once it is closed, however the command ends. Only its last bytes are
// kept: while the command runs, the file is checked every 20 ms and cut
// when past 1 MiB (so that it holds about that, and what the command
// writes in 20 ms; what it writes in the instant of a cut may be lost),
// and [Output.Tail] reads back no more than its last keep bytes.
//
// With no temporary directory to write to (a read-only root file system),
// the output goes to os.DevNull and Tail says it was not kept: a command
// runs without a place for its output rather than not at all.
type Output struct {
	f     *os.File
	keep  int64
	lost  error // why the output is not kept, when it is not
	mu    sync.Mutex
	carry []byte // the last bytes before the latest cut
	stop  chan struct{}
	done  chan struct{}
}

// NewOutput returns an Output that keeps the last keep bytes (at most
// 1 MiB). Close it.
func NewOutput(keep int) (*Output, error) {
	o := &Output{keep: min(max(int64(keep), 0), maxFile), stop: make(chan struct{}), done: make(chan struct{})}
	f, err := unlinkedTemp()
	if err != nil {
		o.lost = err
		if f, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0); err != nil {
			return nil, fmt.Errorf("procgroup: output: %w", err)
		}
		close(o.done)
		o.f = f
		return o, nil
	}
	o.f = f
	go o.trimLoop()
	return o, nil
}

// unlinkedTemp is a new file in os.TempDir, open for appending (so that a
// cut file is written from its start again) and already removed.
func unlinkedTemp() (*os.File, error) {
	made, err := os.CreateTemp("", "modwatch-output-*")
	if err != nil {
		return nil, err
	}
	name := made.Name()
	f, err := os.OpenFile(name, os.O_RDWR|os.O_APPEND, 0)
	_ = made.Close()
	if err == nil {
		if err = os.Remove(name); err == nil {
			return f, nil
		}
		_ = f.Close() // a system that removes no open file
	}
	_ = os.Remove(name)
	return nil, err
}

// File is the file to give the command as its stdout and stderr.
func (o *Output) File() *os.File { return o.f }

func (o *Output) trimLoop() {
	defer close(o.done)
	tick := time.NewTicker(trimEvery)
	defer tick.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-tick.C:
			o.trim()
		}
	}
}

// trim cuts the file when it is past maxFile, keeping its last bytes.
func (o *Output) trim() {
	o.mu.Lock()
	defer o.mu.Unlock()
	fi, err := o.f.Stat()
	if err != nil || fi.Size() <= maxFile {
		return
	}
	last := make([]byte, o.keep)
	n, _ := o.f.ReadAt(last, fi.Size()-o.keep)
	o.carry = last[:n]
	_ = o.f.Truncate(0)
}

// Tail is the last keep bytes of the output (read back from the file,
// never more), or a note of why it was not kept.
func (o *Output) Tail() string {
	if o.lost != nil {
		return fmt.Sprintf("(output not kept: %v)", o.lost)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	fi, err := o.f.Stat()
	if err != nil {
		return fmt.Sprintf("(output not read: %v)", err)
	}
	off := max(fi.Size()-o.keep, 0)
	tail := make([]byte, fi.Size()-off)
	n, _ := o.f.ReadAt(tail, off)
	tail = tail[:n]
	if missing := o.keep - int64(n); missing > 0 && len(o.carry) > 0 {
		tail = append(slices.Clone(o.carry[max(int64(len(o.carry))-missing, 0):]), tail...)
	}
	return string(tail)
}

// Close stops the cuts, empties the file (a process that still holds it
// keeps it, not what it held) and closes it.
func (o *Output) Close() error {
	select {
	case <-o.stop:
		return nil
	default:
		close(o.stop)
	}
	<-o.done
	if o.lost == nil {
		_ = o.f.Truncate(0)
	}
	return o.f.Close()
}
