package service

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/tuft-go/tuft/engine"
)

// recoverSaves finishes or rolls back every adapter save a crash interrupted in this
// server's directories (its runs' autosaves and checkpoints, its samplers' weights), and
// removes the temporary files those saves left; see engine.RecoverSave. It runs at start,
// before anything reads them, when no save of this server is under way. Other replicas'
// directories are theirs to recover.
func (s *Service) recoverSaves() {
	var dirs []string
	for r := range s.runs.all() {
		id := r.ID
		dirs = append(dirs, s.ckpts.layout().autosaveDir(id), s.ckpts.layout().inflightDir(id))
		for c := range s.ckpts.inRun(id) {
			dirs = append(dirs, c.Dir)
		}
	}
	for sm := range s.samplers.all() {
		if sm.Ephemeral && sm.AdapterDir != "" {
			dirs = append(dirs, sm.AdapterDir)
		}
	}
	// Saves that crashed before their record was written: only their leftovers (a
	// ".tmp-<name>-<digits>" or "<name>.old") name them.
	seen := map[string]bool{}
	for _, d := range dirs {
		seen[d] = true
	}
	for r := range s.runs.all() {
		id := r.ID
		for _, parent := range s.ckpts.layout().saveParents(id) {
			ents, _ := os.ReadDir(parent)
			for _, e := range ents {
				name := leftoverOf(e.Name())
				if d := filepath.Join(parent, name); name != "" && !seen[d] {
					seen[d] = true
					dirs = append(dirs, d)
				}
			}
		}
	}
	for _, d := range dirs {
		if err := engine.RecoverSave(d); err != nil {
			s.log.Error("could not recover an interrupted save", "dir", d, "error", err)
		}
	}
}

// leftoverOf names the save directory a leftover of an interrupted save belongs to
// ("" if name is none).
func leftoverOf(name string) string {
	if base, ok := strings.CutSuffix(name, ".old"); ok {
		return base
	}
	rest, ok := strings.CutPrefix(name, ".tmp-")
	if !ok {
		return ""
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 || strings.Trim(rest[i+1:], "0123456789") != "" || i == len(rest)-1 {
		return ""
	}
	return rest[:i]
}
