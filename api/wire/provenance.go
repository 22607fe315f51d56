package wire

import (
	"fmt"

	"github.com/tuft-go/tuft/api/wire/tinkerpb"
)

// checkProvenance validates a datum's provenance spans (SDK >= 0.26, Datum.with_provenance):
// each span names a sampled sequence, with offset and length >= 0, and the spans of a
// field tile it: model_input_spans sum to the input's token count, loss_fn_input_spans to
// the length of a 1-D target_tokens.
//
// Spans describe where each token came from; they change no loss this server implements
// (only stable_reinforce, which it refuses, reads them), so a valid set is accepted and has
// no effect. They are not refused: the SDK attaches them to every RL datum whatever the
// loss (tinker-cookbook's RL loop does), and refusing them failed every cookbook RL recipe.
func checkProvenance(field string, d *tinkerpb.Datum, nTokens int, targets Tensor, hasTargets bool) error {
	if err := checkSpans(field+".model_input_spans", d.ModelInputSpans, nTokens, true); err != nil {
		return err
	}
	tileTargets := hasTargets && len(targets.Shape) == 1
	n := 0
	if tileTargets {
		n = targets.Shape[0]
	}
	return checkSpans(field+".loss_fn_input_spans", d.LossFnInputSpans, n, tileTargets)
}

func checkSpans(field string, spans []*tinkerpb.ProvenanceSpan, want int, tile bool) error {
	if len(spans) == 0 {
		return nil
	}
	total := int64(0)
	for i, s := range spans {
		f := fmt.Sprintf("%s[%d]", field, i)
		var seq string
		var off, n int64
		switch x := s.GetSpan().(type) {
		case *tinkerpb.ProvenanceSpan_PromptTokens:
			seq, off, n = x.PromptTokens.GetSequenceId(), x.PromptTokens.GetOffset(), x.PromptTokens.GetLength()
		case *tinkerpb.ProvenanceSpan_SampledTokens:
			seq, off, n = x.SampledTokens.GetSequenceId(), x.SampledTokens.GetOffset(), x.SampledTokens.GetLength()
		default:
			return errf(f, "is neither prompt_tokens nor sampled_tokens")
		}
		switch {
		case seq == "":
			return errf(f+".sequence_id", "is required")
		case off < 0:
			return errf(f+".offset", "%d must not be negative", off)
		case n < 0:
			return errf(f+".length", "%d must not be negative", n)
		}
		total += n
	}
	if tile && total != int64(want) {
		return errf(field, "spans cover %d positions; they must tile the field's %d", total, want)
	}
	return nil
}
