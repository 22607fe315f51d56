package service

import (
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
)

// CheckRun says whether tenant may operate on run id now, with the error an operation
// on it would get (404 for a missing or another tenant's run): the HTTP layer asks
// before decoding a large request about it.
func (s *Service) CheckRun(tenant, id string) error {
	s.lock(lkSessions | lkRuns)
	_, err := s.usableRun(tenant, id)
	s.unlock(lkSessions | lkRuns)
	return s.settle(err)
}

// CheckSampler says whether tenant may sample on sampling session id (the error a
// sample on it would get), for the same purpose.
func (s *Service) CheckSampler(tenant, id string) error {
	sm, err := s.GetSampler(tenant, id)
	if err != nil {
		return err
	}
	s.lock(lkSessions)
	err = finishedErr(s.sessions.at(sm.SessionID))
	s.unlock(lkSessions)
	if err != nil {
		return err
	}
	if sm.Closed {
		return closedError(sm)
	}
	return nil
}

// checkSample refuses a sample request the engine would refuse, and stop strings over
// limits.max_stop_strings / limits.max_stop_string_bytes, before it is queued.
func (s *Service) checkSample(c engine.Config, req engine.SampleRequest) error {
	lim := s.cfg.Limits
	if n := len(req.Params.StopStrings); n > lim.MaxStopStrings {
		return invalidf("sampling_params.stop has %d strings, more than limits.max_stop_strings %d", n, lim.MaxStopStrings)
	}
	total := 0
	for _, st := range req.Params.StopStrings {
		total += len(st)
	}
	if total > lim.MaxStopStringBytes {
		return invalidf("sampling_params.stop strings total %d bytes, more than limits.max_stop_string_bytes %d", total, lim.MaxStopStringBytes)
	}
	if err := checkPromptOutputs(lim, req); err != nil {
		return err
	}
	return classify(engine.ValidateSample(c, req))
}

// checkPromptOutputs bounds the newer sampling outputs a request asks for by the limits
// (their shapes and ids engine.ValidateSample checks).
func checkPromptOutputs(lim config.Limits, req engine.SampleRequest) error {
	rows := max(0, len(req.Prompt)-1)
	switch k := req.TopKSampleLogprobs; {
	case k > lim.MaxTopKSampleLogprobs:
		return invalidf("topk_sample_logprobs %d is more than limits.max_topk_sample_logprobs %d", k, lim.MaxTopKSampleLogprobs)
	case req.PromptAltTokensK > lim.MaxPromptAltTokensK:
		return invalidf("prompt_alt_tokens_k %d is more than limits.max_prompt_alt_tokens_k %d", req.PromptAltTokensK, lim.MaxPromptAltTokensK)
	case rows*req.PromptAltTokensK > lim.MaxPromptOutputCells:
		return invalidf("prompt_alt_tokens_k %d asks for %d draws over the prompt's %d positions, more than limits.max_prompt_output_cells %d",
			req.PromptAltTokensK, rows*req.PromptAltTokensK, rows, lim.MaxPromptOutputCells)
	}
	if t := req.PromptTargets; t != nil {
		// Dense or sparse, the ids are the cells (engine.ValidateSample checks a dense
		// matrix has rows×columns of them).
		if cells := len(t.IDs); cells > lim.MaxPromptOutputCells {
			return invalidf("target_prompt_logprobs has %d cells, more than limits.max_prompt_output_cells %d", cells, lim.MaxPromptOutputCells)
		}
	}
	return nil
}
