package service

// CheckRun says whether tenant may operate on run id now, with the error an operation
// on it would get (404 for a missing or another tenant's run): the HTTP layer asks
// before decoding a large request about it.
func (s *Service) CheckRun(tenant, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.usableRun(tenant, id)
	return err
}

// CheckSampler says whether tenant may sample on sampling session id (the error a
// sample on it would get), for the same purpose.
func (s *Service) CheckSampler(tenant, id string) error {
	sm, err := s.GetSampler(tenant, id)
	if err != nil {
		return err
	}
	if sm.Closed {
		return closedError(sm)
	}
	return nil
}
