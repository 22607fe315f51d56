package wire

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tuft-go/tuft/api/wire/tinkerpb"
)

func prompt(seq string, off, n int64) *tinkerpb.ProvenanceSpan {
	return &tinkerpb.ProvenanceSpan{Span: &tinkerpb.ProvenanceSpan_PromptTokens{PromptTokens: &tinkerpb.PromptProvenanceSpan{SequenceId: seq, Offset: off, Length: n}}}
}

func sampled(seq string, off, n int64) *tinkerpb.ProvenanceSpan {
	return &tinkerpb.ProvenanceSpan{Span: &tinkerpb.ProvenanceSpan_SampledTokens{SampledTokens: &tinkerpb.SampledProvenanceSpan{SequenceId: seq, Offset: off, Length: n}}}
}

// TestProvenanceSpans: spans that tile their fields are accepted and leave the datum as it
// was (no implemented loss reads them); malformed ones are refused naming the span.
func TestProvenanceSpans(t *testing.T) {
	t.Parallel()
	base, err := EncodeForwardBackwardProto(sampleCall()) // one datum: 3 tokens, 3 targets
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		input, losses []*tinkerpb.ProvenanceSpan
		want          string // "" = accepted
	}{
		{"as tinker-cookbook's RL loop sends them", []*tinkerpb.ProvenanceSpan{prompt("r:0", 0, 2), sampled("r:0", 0, 1)},
			[]*tinkerpb.ProvenanceSpan{prompt("r:0", 1, 1), sampled("r:0", 0, 2)}, ""},
		{"zero-length spans", []*tinkerpb.ProvenanceSpan{prompt("r:0", 0, 3), sampled("r:1", 0, 0)}, nil, ""},
		{"input not tiled", []*tinkerpb.ProvenanceSpan{prompt("r:0", 0, 2)}, nil, "data[0].model_input_spans: spans cover 2 positions; they must tile the field's 3"},
		{"targets not tiled", nil, []*tinkerpb.ProvenanceSpan{sampled("r:0", 0, 4)}, "data[0].loss_fn_input_spans: spans cover 4"},
		{"no sequence", []*tinkerpb.ProvenanceSpan{prompt("", 0, 3)}, nil, "data[0].model_input_spans[0].sequence_id"},
		{"negative offset", nil, []*tinkerpb.ProvenanceSpan{sampled("r:0", -1, 3)}, "data[0].loss_fn_input_spans[0].offset"},
		{"negative length", []*tinkerpb.ProvenanceSpan{prompt("r:0", 0, 4), sampled("r:0", 0, -1)}, nil, "data[0].model_input_spans[1].length"},
		{"empty span", []*tinkerpb.ProvenanceSpan{{}}, nil, "neither prompt_tokens nor sampled_tokens"},
	} {
		var m tinkerpb.ForwardBackwardRequest
		if err := proto.Unmarshal(base, &m); err != nil {
			t.Fatal(err)
		}
		m.Data[0].ModelInputSpans, m.Data[0].LossFnInputSpans = tc.input, tc.losses
		b, err := proto.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeForwardBackwardProto(b)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			} else if d := got.Req.Data[0]; len(d.Tokens) != 3 || d.LossInputs["target_tokens"].I64[2] != 4 {
				t.Errorf("%s: datum changed: %+v", tc.name, d)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}
