package adversarial

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/store/logstore"
)

// Damage at random offsets of a real server's store: tuft either starts with every
// record (only the end marker of the last session was hit) or refuses to start with a
// message naming the file and the repair; `tuft store check` reports the damage (exit
// 1), `tuft store repair` keeps every intact record and moves the damaged bytes aside,
// and tuft starts again with every checkpoint whose record was not in the damage.
// ckptName finds a training checkpoint's record key (…/training/cNN) in raw store bytes.
var ckptName = regexp.MustCompile(`/training/(c[0-9][0-9])`)

func TestStoreCorruptionAtRandomOffsets(t *testing.T) {
	home := t.TempDir()
	port := testenv.FreePort(t)
	ckdir := filepath.Join(home, "checkpoints")
	cfg := configYAML(t, port, "", "checkpoint_dir: "+ckdir+"\n")
	p, _ := launch(t, home, cfg)
	a := newTenant(t, p.base, testenv.KeyA)
	model := a.model(a.session(), 0)
	const nCkpt = 12
	for i := 0; i < nCkpt; i++ {
		a.c.Result(a.submit("/api/v1/save_weights", map[string]any{"model_id": model, "path": fmt.Sprintf("c%02d", i), "seq_id": i + 1}), nil)
	}
	b := newTenant(t, p.base, testenv.KeyB)
	b.model(b.session(), 0)
	p.stop()
	pristine, err := os.ReadFile(filepath.Join(home, "tuft.db"))
	if err != nil {
		t.Fatal(err)
	}
	listed := func(p *proc) map[string]bool {
		var cks struct {
			Checkpoints []struct {
				CheckpointID string `json:"checkpoint_id"`
			} `json:"checkpoints"`
		}
		newTenant(t, p.base, testenv.KeyA).c.Do("GET", "/api/v1/checkpoints?limit=100", nil, nil).JSON(t, &cks)
		out := map[string]bool{}
		for _, c := range cks.Checkpoints {
			out[c.CheckpointID] = true
		}
		return out
	}
	rng := rand.New(rand.NewPCG(12, uint64(len(pristine))))
	started, repaired := 0, 0
	for trial := 0; trial < 4; trial++ {
		bad := bytes.Clone(pristine)
		at := 8 + rng.IntN(len(bad)-8)
		bad[at] ^= 1 << rng.UintN(8)
		h := t.TempDir()
		db := filepath.Join(h, "tuft.db")
		if err := os.WriteFile(db, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := logstore.Check(db)
		if err != nil {
			t.Fatal(err)
		}
		// The checkpoints whose records lie in the damaged bytes: read from the pristine
		// file (the flipped bit may sit in a key, or in a frame header that hides them).
		lost := map[string]bool{}
		for _, d := range rep.Damage {
			lo, hi := max(0, int(d.Offset)), min(len(pristine), int(d.End))
			for _, m := range ckptName.FindAllSubmatch(pristine[lo:hi], -1) {
				lost["weights/"+string(m[1])] = true
			}
		}
		p, ok := launch(t, h, cfg)
		if ok {
			// Only a torn end may be cut, and it held no record.
			if rep.Corrupt() || len(listed(p)) != nCkpt {
				t.Fatalf("trial %d (offset %d): started over damage %+v with %d checkpoints", trial, at, rep.Damage, len(listed(p)))
			}
			p.stop()
			started++
			continue
		}
		if !contains(p.logText(), db, "tuft store repair") {
			t.Fatalf("trial %d (offset %d): tuft stopped without saying what to do:\n%s", trial, at, p.logText())
		}
		out, err := exec.Command(tuftBin(t), "store", "check", "--path", db).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !contains(string(out), "damage 1:", "corruption") {
			t.Fatalf("trial %d: tuft store check: %v\n%s", trial, err, out)
		}
		out, err = exec.Command(tuftBin(t), "store", "repair", "--path", db).CombinedOutput()
		if err != nil || !contains(string(out), "repaired", "moved to "+db+".damaged-") {
			t.Fatalf("trial %d: tuft store repair: %v\n%s", trial, err, out)
		}
		p, ok = launch(t, h, cfg)
		if !ok {
			t.Fatalf("trial %d: tuft does not start after the repair:\n%s", trial, p.logText())
		}
		got := listed(p)
		for i := 0; i < nCkpt; i++ {
			id := fmt.Sprintf("weights/c%02d", i)
			if !got[id] && !lost[id] {
				t.Fatalf("trial %d (offset %d): intact checkpoint %s lost by the repair (damage %+v)", trial, at, id, rep.Damage)
			}
		}
		p.stop()
		repaired++
	}
	t.Logf("%d trials started (torn end marker only), %d refused and repaired", started, repaired)
}
