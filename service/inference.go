package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/chat"
	"github.com/tuft-go/tuft/engine/tokenizer"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/telemetry"
)

// This file serves the OpenAI- and Anthropic-compatible routes: a model named by text
// (a base model, a tinker:// checkpoint path, or "<base>;<path>"), text turned into
// tokens and back, and generation through the same sampling path as asample.

// InferenceTarget is a model as an OpenAI- or Anthropic-compatible request names it,
// resolved for one tenant.
type InferenceTarget struct {
	Model      string // as the client wrote it
	BaseModel  string
	Checkpoint string // tinker:// path of the adapter; "" for the base model
	RunID      string // the checkpoint's training run
	// MaxContextLength bounds prompt plus completion tokens.
	MaxContextLength int
	VocabSize        int

	text   *backend.Text
	limits config.Limits // the render bounds (limits.max_chat_*)
	dir    string
	mod    time.Time // the adapter file's modification time: a rewritten checkpoint reloads
}

// InferenceModel is one entry of the compatible APIs' model list.
type InferenceModel struct {
	ID        string
	Created   time.Time
	OwnedBy   string
	BaseModel string
}

// InferenceModels lists what a tenant may name: the served base models, then the
// tenant's sampler checkpoints, newest first.
func (s *Service) InferenceModels(ctx context.Context, tenant string) []InferenceModel {
	var out []InferenceModel
	for _, m := range s.Models() {
		out = append(out, InferenceModel{ID: m.Name, OwnedBy: "tuft", BaseModel: m.Name})
	}
	ckpts, _ := s.ListAllCheckpoints(ctx, tenant, 0, 0)
	for _, c := range ckpts {
		if c.Type == CkptSampler {
			out = append(out, InferenceModel{ID: c.TinkerPath(), Created: c.CreatedAt, OwnedBy: c.Tenant, BaseModel: c.BaseModel})
		}
	}
	return out
}

// ResolveInference finds the model a compatible request names: a base model, a
// tinker://<run>/sampler_weights/<name> path (training checkpoints under weights/ work
// too), or "<base>;<path>" whose base must be the one the checkpoint was trained on.
// Anything the tenant cannot see, including another tenant's unpublished checkpoint, is
// a KindNotFound error, the same as a checkpoint that does not exist.
func (s *Service) ResolveInference(tenant, name string) (*InferenceTarget, error) {
	base, path := name, ""
	if b, p, ok := strings.Cut(name, ";"); ok {
		base, path = b, p
	} else if strings.HasPrefix(name, "tinker://") {
		base, path = "", name
	}
	if name == "" {
		return nil, invalidf("model is required")
	}
	if base != "" {
		if _, ok := s.models[base]; !ok {
			return nil, notFoundf("the model %q does not exist; base models served here: %s", base, strings.Join(s.modelNames(), ", "))
		}
	}
	t := &InferenceTarget{Model: name, BaseModel: base}
	if path != "" {
		fetched := s.fetchCheckpoint(path)
		s.lock(lkCkpts)
		c, err := s.ckpts.resolve(tenant, path, fetched)
		s.unlock(lkCkpts)
		if err == nil {
			err = notAnExport(c, path)
		}
		if err != nil {
			return nil, notFoundf("the model %q does not exist or you do not have access to it: %s", name, err.Error())
		}
		if base != "" && base != c.BaseModel {
			return nil, invalidf("model %q: checkpoint %s was trained on %s, not %s", name, path, c.BaseModel, base)
		}
		mod, ok := adapterModTime(c.Dir)
		if !ok {
			return nil, notFoundf("the model %q: its checkpoint files are missing on the server", name)
		}
		t.BaseModel, t.Checkpoint, t.RunID, t.dir, t.mod = c.BaseModel, c.TinkerPath(), c.RunID, c.Dir, mod
	}
	mi, ok := s.models[t.BaseModel]
	if !ok {
		return nil, notFoundf("the model %q: its base model %q is no longer served here", name, t.BaseModel)
	}
	t.MaxContextLength, t.VocabSize, t.text = s.maxContext(t.BaseModel, mi), mi.VocabSize, mi.Text
	t.limits = s.cfg.Limits
	return t, nil
}

func (t *InferenceTarget) tokenizer() (*backend.Text, error) {
	if t.text == nil {
		return nil, invalidf("model %q: this server has no tokenizer for base model %s (its worker sent none: it predates "+
			"the compatible routes), and the OpenAI- and Anthropic-compatible routes turn text into tokens here; use the Tinker sampling API with tokens", t.Model, t.BaseModel)
	}
	return t.text, nil
}

// Encode tokenizes text, recognising the model's special tokens.
func (t *InferenceTarget) Encode(text string) ([]int32, error) {
	tx, err := t.tokenizer()
	if err != nil {
		return nil, err
	}
	ids, err := tx.Codec.Encode(text)
	if err != nil {
		return nil, invalidf("model %q: the text could not be tokenized: %v", t.Model, err)
	}
	return ids, nil
}

// Decode turns tokens into text. The tokenizers served here are byte-level: the text of
// a token sequence is the concatenation of each token's bytes, which may end inside a
// UTF-8 character.
func (t *InferenceTarget) Decode(ids []int32) string {
	if t.text == nil {
		return ""
	}
	return t.text.Codec.Decode(ids)
}

// IsEOS reports whether id ends generation as the model's end-of-sequence token (its
// text is then not part of the completion).
func (t *InferenceTarget) IsEOS(id int32) bool {
	if t.text == nil {
		return false
	}
	for _, e := range t.text.EOSTokenIDs {
		if e == id {
			return true
		}
	}
	return false
}

// ChatMessage is one turn of a conversation for the chat template.
type ChatMessage struct {
	Role    string
	Content string
}

// ErrContextLength is wrapped by the error of a prompt that cannot fit the model's
// context, found while rendering or tokenizing it (the OpenAI routes answer it with
// code context_length_exceeded).
var ErrContextLength = errors.New("the prompt exceeds the model's context")

// RenderChat applies the model's chat template; addGenerationPrompt ends the text with
// the header of an assistant turn. A conversation over limits.max_chat_messages or
// limits.max_chat_bytes is refused before rendering starts; rendering stops as soon as
// the text is too long to fit the model's context (ErrContextLength) and when ctx ends
// (issue 22: the render of a hostile conversation costs in proportion to what is
// accepted, and nothing after its client has gone).
func (t *InferenceTarget) RenderChat(ctx context.Context, msgs []ChatMessage, addGenerationPrompt bool) (string, error) {
	tx, err := t.tokenizer()
	if err != nil {
		return "", err
	}
	if tx.Template == nil {
		if tx.TemplateErr != nil {
			return "", invalidf("model %q: its chat template could not be compiled (%v); use the completions route with a prompt", t.Model, tx.TemplateErr)
		}
		return "", invalidf("model %q has no chat template; use the completions route with a prompt", t.Model)
	}
	cm := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		cm[i] = chat.Message{Role: m.Role, Content: m.Content}
	}
	lim := chat.Limits{MaxMessages: t.limits.MaxChatMessages, MaxBytes: t.limits.MaxChatBytes}
	if b, ok := tx.Codec.(interface{ MaxTokenBytes() int }); ok && t.MaxContextLength > 0 && b.MaxTokenBytes() > 0 {
		// More bytes than this are more tokens than the context holds.
		lim.MaxOutputBytes = int64(t.MaxContextLength) * int64(b.MaxTokenBytes())
	}
	out, err := tx.Template.Render(ctx, cm, chat.Options{AddGenerationPrompt: addGenerationPrompt, BosToken: tx.BOS, EosToken: tx.EOS, Limits: lim})
	if err != nil {
		var le *chat.LimitError
		var re *chat.RaiseError
		switch {
		case errors.As(err, &le) && le.Limit == chat.LimitMessages:
			return "", invalidf("messages: %d messages; at most %d are allowed (limits.max_chat_messages)", le.Got, le.Max)
		case errors.As(err, &le) && le.Limit == chat.LimitBytes:
			return "", invalidf("messages: %d bytes of roles and contents; at most %d are allowed (limits.max_chat_bytes)", le.Got, le.Max)
		case errors.As(err, &le):
			return "", &Error{Kind: KindInvalid, Err: ErrContextLength,
				Msg: fmt.Sprintf("the rendered conversation passed %d bytes, more than the model's context of %d tokens can hold", le.Max, t.MaxContextLength)}
		case ctx.Err() != nil:
			return "", fmt.Errorf("rendering the conversation: %w", ctx.Err())
		case errors.As(err, &re):
			return "", invalidf("model %q: its chat template refused the conversation: %s", t.Model, re.Message)
		}
		return "", invalidf("model %q: its chat template failed on the conversation: %v", t.Model, err)
	}
	return out, nil
}

// EncodePrompt tokenizes a prompt as Encode does, but stops with ErrContextLength as
// soon as it has more tokens than the model's context, and when ctx ends.
func (t *InferenceTarget) EncodePrompt(ctx context.Context, text string) ([]int32, error) {
	tx, err := t.tokenizer()
	if err != nil {
		return nil, err
	}
	enc, ok := tx.Codec.(interface {
		EncodeContext(context.Context, string, int) ([]int32, error)
	})
	if !ok {
		return t.Encode(text)
	}
	ids, err := enc.EncodeContext(ctx, text, t.MaxContextLength)
	switch {
	case errors.Is(err, tokenizer.ErrTooManyTokens):
		return nil, &Error{Kind: KindInvalid, Err: ErrContextLength,
			Msg: fmt.Sprintf("the prompt has more than %d tokens, the model's context", t.MaxContextLength)}
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("tokenizing the prompt: %w", ctx.Err())
	case err != nil:
		return nil, invalidf("model %q: the text could not be tokenized: %v", t.Model, err)
	}
	return ids, nil
}

// InferInput is one generation request of the compatible routes.
type InferInput struct {
	Target *InferenceTarget
	Req    engine.SampleRequest
	// Stream, when set, receives each token as it is drawn; top logprobs need it. Where
	// the model's executor cannot stream (a remote worker), Infer fails with KindInvalid.
	Stream *backend.Stream
}

// InferOutput is a finished generation.
type InferOutput struct {
	RequestID string // the future that ran it (tuft.request_id)
	Result    engine.SampleResult
}

// Infer runs one generation through the sampling path asample uses: the same
// validation and per-tenant limits, the same futures pool of the base model (so it
// queues fairly with Tinker sampling and is batched with it where the executor batches),
// the same spans and metrics. It waits for the result; ending ctx cancels the operation,
// queued or running.
func (s *Service) Infer(ctx context.Context, tenant string, in InferInput) (out InferOutput, err error) {
	t := in.Target
	if _, err := t.tokenizer(); err != nil {
		return out, err
	}
	// The future's spans carry the keys too: a query by training run finds inference on
	// its checkpoints.
	ctx = telemetry.WithKeys(ctx, telemetry.Keys{TrainingRunID: t.RunID, BaseModel: t.BaseModel, OperationType: telemetry.OpSample})
	job := sampleJob{tenant: tenant, base: t.BaseModel, req: in.Req, stream: in.Stream, live: ctx,
		keys: telemetry.Keys{TrainingRunID: t.RunID}}
	var (
		res    engine.SampleResult
		runErr error
	)
	job.encode = func(r engine.SampleResult) (futures.Result, error) {
		res = r
		// The result goes to the waiting caller, not to the store: nobody retrieves it.
		return futures.Result{Kind: "inference"}, nil
	}
	job.failed = func(err error) { runErr = err }
	if t.Checkpoint != "" {
		lora, release, err := s.adapters.acquire(ctx, t)
		if err != nil {
			return out, err
		}
		job.lora, job.adapterDir, job.finally = lora, t.dir, release
	}
	id, err := s.submitSample(ctx, job)
	if err != nil {
		if job.finally != nil {
			job.finally()
		}
		return out, err
	}
	out.RequestID = id
	for {
		rec, err := s.fut.Wait(ctx, tenant, id, time.Minute)
		if err != nil {
			return out, fmt.Errorf("waiting for request %s: %w", id, err)
		}
		if !rec.Done() {
			continue
		}
		if rec.Status == futures.StatusFailed {
			if runErr == nil {
				msg := "generation failed"
				if rec.Failure != nil {
					msg = rec.Failure.Message
				}
				return out, &Error{Kind: KindInternal, Msg: msg}
			}
			if errors.Is(runErr, backend.ErrNoStreaming) {
				return out, &Error{Kind: KindInvalid, Msg: fmt.Sprintf("model %q: %v; ask without stream and top logprobs", t.Model, runErr), Err: runErr}
			}
			return out, runErr
		}
		out.Result = res
		return out, nil
	}
}

// LoadedInferenceAdapters is how many checkpoints the compatible routes hold loaded.
func (s *Service) LoadedInferenceAdapters() int {
	return s.adapters.loaded()
}

// Limits are the configured per-request limits, for the routes that check requests
// before they reach Infer (to name the field a client got wrong).
func (s *Service) Limits() config.Limits { return s.cfg.Limits }
