package service

import (
	"github.com/tuft-go/tuft/engine"
)

// recoverSaves finishes or rolls back every adapter save a crash interrupted in this
// server's directories (its runs' autosaves and checkpoints, its samplers' weights), and
// removes the temporary files those saves left; see engine.RecoverSave. It runs at start,
// before anything reads them, when no save of this server is under way. Other replicas'
// directories are theirs to recover.
func (s *Service) recoverSaves() {
	var dirs []string
	for id := range s.runs {
		dirs = append(dirs, s.autosaveDir(id))
		for _, c := range s.ckpts[id] {
			dirs = append(dirs, c.Dir)
		}
	}
	for _, sm := range s.samplers {
		if sm.Ephemeral && sm.AdapterDir != "" {
			dirs = append(dirs, sm.AdapterDir)
		}
	}
	for _, d := range dirs {
		if err := engine.RecoverSave(d); err != nil {
			s.log.Error("could not recover an interrupted save", "dir", d, "error", err)
		}
	}
}
