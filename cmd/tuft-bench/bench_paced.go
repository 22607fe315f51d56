package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
)

// The CPU reference's training steps taken in turn with the engine's (--interleave): on a
// shared machine a burst of someone else's work lasts seconds, about one training step, and
// when each side ran all its steps in one stretch such a burst slowed one side only, so a
// single run's ratio moved by a fifth either way. With both processes loaded and their steps
// alternating (engine then reference, then reference then engine), a burst lands on both.

// pacedRef is a running reference (tools/torchref/bench.py --paced) that waits for a line
// on stdin before each training step and before sampling.
type pacedRef struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	name string // for errors: the interpreter and script
	err  error  // the first failure; the steps after it are not asked for
}

// startPacedRef starts the reference with args (args[0] is its script; --paced among them)
// and waits until it has loaded the model and measured its BLAS.
func startPacedRef(python string, args []string, stderr io.Writer) (*pacedRef, error) {
	cmd := exec.Command(python, args...)
	cmd.Env = referenceEnv(python, passiveWait)
	cmd.Stderr = stderr
	p := &pacedRef{cmd: cmd, name: filepath.Base(python) + " " + filepath.Base(args[0])}
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewScanner(stdout)
	p.out.Buffer(make([]byte, 64<<10), 16<<20) // the final report is one line
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", p.name, err)
	}
	var ready struct {
		Ready bool `json:"ready"`
	}
	if err := p.read(&ready); err != nil || !ready.Ready {
		p.stop()
		if err == nil {
			err = errors.New(`its first line is not {"ready": true}`)
		}
		return nil, fmt.Errorf("%s: %w", p.name, err)
	}
	return p, nil
}

// read decodes the reference's next stdout line into v.
func (p *pacedRef) read(v any) error {
	if !p.out.Scan() {
		if err := p.out.Err(); err != nil {
			return err
		}
		return io.ErrUnexpectedEOF
	}
	line := p.out.Bytes()
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("%w: %q", err, strings.TrimSpace(string(line)))
	}
	return nil
}

// step runs the reference's training step i (0 is its warm-up) and waits for it. A failure
// is kept for result and stops later steps: the engine's run goes on either way.
func (p *pacedRef) step(i int) {
	if p.err != nil {
		return
	}
	var got struct {
		Step    *int    `json:"step"`
		Seconds float64 `json:"seconds"`
	}
	if _, err := io.WriteString(p.in, "step\n"); err != nil {
		p.err = fmt.Errorf("%s: step %d: %w", p.name, i, err)
		return
	}
	if err := p.read(&got); err != nil {
		p.err = fmt.Errorf("%s: step %d: %w", p.name, i, err)
		return
	}
	if got.Step == nil || *got.Step != i || got.Seconds <= 0 {
		p.err = fmt.Errorf("%s: asked for step %d, it reported %+v", p.name, i, got)
	}
}

// result lets the reference sample, waits for it to exit and decodes its report into v;
// last is the report's line.
func (p *pacedRef) result(v any) (last string, _ error) {
	if p.err != nil {
		p.stop()
		return "", p.err
	}
	if _, err := io.WriteString(p.in, "sample\n"); err != nil {
		p.stop()
		return "", fmt.Errorf("%s: %w", p.name, err)
	}
	p.in.Close()
	for p.out.Scan() {
		last = p.out.Text()
	}
	if err := p.cmd.Wait(); err != nil {
		return "", fmt.Errorf("%s: %w", p.name, err)
	}
	if err := json.Unmarshal([]byte(last), v); err != nil {
		return "", fmt.Errorf("parse reference output: %w\n%s", err, last)
	}
	return last, nil
}

// stop ends the reference if it still runs (an error on either side).
func (p *pacedRef) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.in.Close()
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}
