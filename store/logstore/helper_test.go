package logstore_test

import (
	"bufio"
	"os"
	"os/exec"
	"testing"
)

// helperProcess runs this test binary as another process holding path open; the
// returned func releases it.
func helperProcess(t *testing.T, path string) func() {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockedFileGetsAClearError$")
	cmd.Env = append(os.Environ(), "LOGSTORE_HOLD="+path)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "held\n" {
		t.Fatalf("helper: %q", line)
	}
	return func() { in.Close(); cmd.Wait() }
}
