package service

// LocksFree reports whether every controller lock is free: a test's store wrapper asks it
// on each store call, to prove that none is made under a controller lock.
func (s *Service) LocksFree() bool {
	for _, mu := range []interface {
		TryLock() bool
		Unlock()
	}{&s.sessions.mu, &s.runs.mu, &s.samplers.mu, &s.ckpts.mu} {
		if !mu.TryLock() {
			return false
		}
		mu.Unlock()
	}
	return true
}

// HoldSpanRecorder stops the session-span recorder from draining its queue until the
// returned function is called, so a test can fill the queue deterministically.
func (s *Service) HoldSpanRecorder() (release func()) {
	s.spans.work.Lock()
	return s.spans.work.Unlock
}
