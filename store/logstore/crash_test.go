//go:build unix

package logstore

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// crashes are the points of the write protocols where the child process is killed, and
// what the disk holds at the kill: "" as the process left it (the page cache survives a
// process crash), "prefix" only the start of the unsynced group (a power loss), "hole"
// the group with a piece in its middle missing (pages persisted out of order).
var crashes = []struct{ point, disk string }{
	{"group-written", ""}, {"group-written", "prefix"}, {"group-written", "hole"},
	{"group-synced", ""}, {"compact-written", ""}, {"compact-renamed", ""},
}

// TestStoreCrashHelper is the child of TestStoreSurvivesSIGKILLInEveryWindow: it writes
// keys (overwriting them, so the file compacts), reports each acknowledged write on
// stdout, and kills itself at the n-th hit of a fault point.
func TestStoreCrashHelper(t *testing.T) {
	path := os.Getenv("LOGSTORE_CRASH_PATH")
	if path == "" {
		t.Skip("the child process of TestStoreSurvivesSIGKILLInEveryWindow")
	}
	point, disk := os.Getenv("LOGSTORE_CRASH_AT"), os.Getenv("LOGSTORE_CRASH_DISK")
	nth, _ := strconv.Atoi(os.Getenv("LOGSTORE_CRASH_NTH"))
	compactMin = 16 << 10
	s, err := Open(path, "ns")
	if err != nil {
		t.Fatal(err)
	}
	hits := 0
	d := s.d
	d.fault = func(p string) {
		if p != point {
			return
		}
		if hits++; hits < nth {
			return
		}
		if fi, err := d.f.Stat(); err == nil && disk != "" {
			written := fi.Size() - d.size // the unsynced group
			switch disk {
			case "prefix":
				_ = d.f.Truncate(d.size + written/2)
			case "hole":
				zero := make([]byte, max(written/3, 1))
				_, _ = d.f.WriteAt(zero, d.size+written/3)
			}
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		k := fmt.Sprintf("k%02d", i%40)
		v := fmt.Sprintf("%d:%s", i, strings.Repeat("v", 200))
		if err := s.Set(ctx, k, []byte(v), 0); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(out, "%s %s\n", k, v)
		out.Flush()
	}
}

// A SIGKILL at any point of the write protocols (group commit, compaction with its
// rename), with the disk holding whatever that point can leave, loses no acknowledged
// write, and the store opens: a crash is never mistaken for corruption.
func TestStoreSurvivesSIGKILLInEveryWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, c := range crashes {
		for _, nth := range []int{1, 7, 60} {
			t.Run(fmt.Sprintf("%s/%s/%d", c.point, c.disk, nth), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "tuft.db")
				cmd := exec.Command(os.Args[0], "-test.run=^TestStoreCrashHelper$")
				cmd.Env = append(os.Environ(), "LOGSTORE_CRASH_PATH="+path, "LOGSTORE_CRASH_AT="+c.point,
					"LOGSTORE_CRASH_DISK="+c.disk, "LOGSTORE_CRASH_NTH="+strconv.Itoa(nth))
				stdout, _ := cmd.StdoutPipe()
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				acked := map[string]string{}
				sc := bufio.NewScanner(stdout)
				sc.Buffer(make([]byte, 1<<20), 1<<20)
				for sc.Scan() {
					if k, v, ok := strings.Cut(sc.Text(), " "); ok && strings.HasPrefix(k, "k") {
						acked[k] = v
					}
				}
				err := cmd.Wait()
				if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("the child was not killed: %v", err)
				}
				s, err := Open(path, "ns")
				if err != nil {
					t.Fatalf("the store does not open after the crash: %v", err)
				}
				defer s.Close()
				for k, v := range acked {
					got, err := s.Get(context.Background(), k)
					if err != nil {
						t.Fatalf("acknowledged %s lost: %v", k, err)
					}
					// A later write of k may have reached the disk without its ack.
					gi, _ := strconv.Atoi(strings.SplitN(string(got), ":", 2)[0])
					wi, _ := strconv.Atoi(strings.SplitN(v, ":", 2)[0])
					if gi < wi {
						t.Fatalf("%s went back from write %d to %d", k, wi, gi)
					}
				}
				if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
					t.Fatalf("compaction file left after the restart: %v", err)
				}
			})
		}
	}
}
