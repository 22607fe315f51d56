package wire

// The /asample request: its JSON shape and the decoder that turns it into a SampleCall.
// The sampling result's encoders live in output.go and sampleout.go.

import (
	"encoding/json"
	"fmt"
	"math"
)

// SampleCall is a decoded asample request.
type SampleCall struct {
	SamplingSessionID string
	BaseModel         string
	ModelPath         string
	SeqID             int64
	Req               SampleInput
	// PromptLogprobsLastN > 0 keeps prompt logprobs for the last N prompt tokens only.
	PromptLogprobsLastN int
}

// Stop is sampling_params.stop: a string, a list of strings, a list of token ids, or null.
// Empty is set for an empty list: no stop at all, EOS included.
type Stop struct {
	Strings []string
	Tokens  []int32
	Empty   bool
}

// UnmarshalJSON accepts every form the SDK sends.
func (s *Stop) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var one string
	if json.Unmarshal(b, &one) == nil {
		s.Strings = []string{one}
		return nil
	}
	var strs []string
	if json.Unmarshal(b, &strs) == nil {
		s.Strings = strs
		s.Empty = len(strs) == 0
		return nil
	}
	var toks []int64
	if json.Unmarshal(b, &toks) == nil {
		for _, t := range toks {
			if t < 0 || t > math.MaxInt32 {
				return fmt.Errorf("stop token id %d is out of range", t)
			}
			s.Tokens = append(s.Tokens, int32(t))
		}
		return nil
	}
	return fmt.Errorf("stop must be a string, a list of strings or a list of token ids")
}

// MarshalJSON writes the list form.
func (s Stop) MarshalJSON() ([]byte, error) {
	if len(s.Tokens) > 0 {
		return json.Marshal(s.Tokens)
	}
	if s.Empty {
		return []byte("[]"), nil
	}
	if s.Strings == nil {
		return []byte("null"), nil
	}
	return json.Marshal(s.Strings)
}

// SamplingParams is sampling_params.
type SamplingParams struct {
	MaxTokens   *int     `json:"max_tokens,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
	Stop        *Stop    `json:"stop,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
}

// SampleRequest is the JSON body of /asample.
type SampleRequest struct {
	NumSamples         *int           `json:"num_samples,omitempty"`
	Prompt             ModelInput     `json:"prompt"`
	SamplingParams     SamplingParams `json:"sampling_params"`
	BaseModel          *string        `json:"base_model,omitempty"`
	ModelPath          *string        `json:"model_path,omitempty"`
	SamplingSessionID  *string        `json:"sampling_session_id,omitempty"`
	SeqID              *int64         `json:"seq_id,omitempty"`
	PromptLogprobs     *bool          `json:"prompt_logprobs,omitempty"`
	TopkPromptLogprobs int            `json:"topk_prompt_logprobs"`
	// Newer fields (SDK 0.26.2-0.33): the sampling outputs (sampleout.go) and
	// prompt_logprobs_last_n are honoured; record_stability_info is refused when true
	// (checkSampleFields).
	TopkSampleLogprobs   int         `json:"topk_sample_logprobs"`
	TargetPromptLogprobs *TensorData `json:"target_prompt_logprobs,omitempty"`
	PromptAltTokensK     int         `json:"prompt_alt_tokens_k"`
	PromptLogprobsLastN  *int        `json:"prompt_logprobs_last_n,omitempty"`
	RecordStabilityInfo  *bool       `json:"record_stability_info,omitempty"`
	Type                 string      `json:"type,omitempty"`
}

// DecodeSampleRequest decodes /asample.
func DecodeSampleRequest(body []byte) (*SampleCall, error) {
	var m SampleRequest
	if err := DecodeRequest(body, &m); err != nil {
		return nil, err
	}
	toks, err := m.Prompt.tokens("prompt")
	if err != nil {
		return nil, err
	}
	if err := m.checkSampleFields(len(toks)); err != nil {
		return nil, err
	}
	c := &SampleCall{Req: SampleInput{Prompt: toks, NumSamples: 1, TopKPromptLogprobs: m.TopkPromptLogprobs,
		TopKSampleLogprobs: m.TopkSampleLogprobs, PromptAltTokensK: m.PromptAltTokensK}}
	if m.TargetPromptLogprobs != nil {
		if c.Req.PromptTargets, err = promptTargets(m.TargetPromptLogprobs); err != nil {
			return nil, err
		}
	}
	if m.NumSamples != nil {
		c.Req.NumSamples = *m.NumSamples
	}
	if m.SamplingSessionID != nil {
		c.SamplingSessionID = *m.SamplingSessionID
	}
	if m.BaseModel != nil {
		c.BaseModel = *m.BaseModel
	}
	if m.ModelPath != nil {
		c.ModelPath = *m.ModelPath
	}
	if m.SeqID != nil {
		c.SeqID = *m.SeqID
	}
	if m.PromptLogprobs != nil {
		c.Req.PromptLogprobs = *m.PromptLogprobs
	}
	if m.TopkPromptLogprobs < 0 {
		return nil, errf("topk_prompt_logprobs", "%d must not be negative", m.TopkPromptLogprobs)
	}
	p := m.SamplingParams
	c.Req.Params = SampleParams{Temperature: 1, TopK: -1, TopP: 1, Seed: p.Seed}
	if p.MaxTokens != nil {
		if *p.MaxTokens < 1 {
			return nil, errf("sampling_params.max_tokens", "%d must be at least 1", *p.MaxTokens)
		}
		c.Req.Params.MaxTokens = *p.MaxTokens
	}
	if p.Temperature != nil {
		c.Req.Params.Temperature = *p.Temperature
	}
	if p.TopK != nil {
		c.Req.Params.TopK = *p.TopK
	}
	if p.TopP != nil {
		c.Req.Params.TopP = *p.TopP
	}
	if p.Stop != nil {
		c.Req.Params.StopStrings, c.Req.Params.StopTokens = p.Stop.Strings, p.Stop.Tokens
		// stop: [] disables every stop token, EOS included (SDK >= 0.27.1 documents it);
		// null or absent keeps the implicit stop at EOS.
		c.Req.Params.IgnoreEOS = p.Stop.Empty
	}
	if m.PromptLogprobsLastN != nil {
		c.PromptLogprobsLastN = *m.PromptLogprobsLastN
	}
	return c, nil
}
