package adversarial

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
)

// Finding 9 of issue 22: a bit flip in the last write group of a SIGKILLed store was cut
// off with one WARN, kept nowhere, and `tuft store check` then exited 0. Now tuft still
// starts on the intact prefix, the cut bytes are kept beside the store file, and
// `tuft store check` exits 1 naming the offset, before the start and after it.
func TestBitFlipInTheLastGroupAfterSIGKILL(t *testing.T) {
	home := t.TempDir()
	cfg := configYAML(t, testenv.FreePort(t), "", "")
	p, _ := launch(t, home, cfg)
	a := newTenant(t, p.base, testenv.KeyA)
	kept := a.session()
	a.session() // its record is the last write, acknowledged
	p.kill()
	db := filepath.Join(home, "tuft.db")
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-10] ^= 0x20 // inside the last frame: its length is whole, its checksum wrong
	if err := os.WriteFile(db, b, 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(when string) string {
		out, err := exec.Command(tuftBin(t), "store", "check", "--path", db).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !contains(string(out), "offset", "acknowledged") {
			t.Fatalf("tuft store check %s: %v\n%s", when, err, out)
		}
		return string(out)
	}
	check("before the start")
	p, ok := launch(t, home, cfg)
	if !ok {
		t.Fatalf("tuft did not start on the intact prefix:\n%s", p.logText())
	}
	a = newTenant(t, p.base, testenv.KeyA)
	if r := a.c.Do("GET", "/api/v1/sessions/"+kept, nil, nil); r.Status != 200 {
		t.Fatalf("a session in the intact prefix: %d %s", r.Status, r.Body)
	}
	p.stop()
	aside, _ := filepath.Glob(db + ".damaged-*-tail-at-*")
	if len(aside) != 1 {
		t.Fatalf("the cut-off end was not kept beside the store: %v", aside)
	}
	if out := check("after the start cut the end off"); !strings.Contains(out, aside[0]) {
		t.Fatalf("check does not name the kept file %s:\n%s", aside[0], out)
	}
}
