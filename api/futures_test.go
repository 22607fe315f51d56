package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

type pollReply struct {
	Completions []struct {
		State     string `json:"state"`
		RequestID string `json:"request_id"`
		Size      *int64 `json:"response_payload_uncompressed_size"`
	} `json:"completions"`
	Cursor int64 `json:"cursor"`
}

// retrieve_futures: one poll per sampling session and clone reports the requests that
// resolved after the client's cursor (finished with their payload size, or failed),
// trims the ones at or before it, holds the poll while there are none, answers at once
// with timeout 0, and keeps clones apart. join_sampling_session numbers the clones.
func TestRetrieveFuturesAndJoin(t *testing.T) {
	h := newHarness(t, "memory")
	sess := h.session(h.a)
	sampler := h.sampler(h.a, sess, 0)
	sample := func(seq int64, maxTokens int) string {
		var f sampleFuture
		h.a.Post("/api/v1/asample", map[string]any{"sampling_session_id": sampler, "seq_id": seq, "num_samples": 1, "prompt": prompt(1, 2, 3),
			"sampling_params": map[string]any{"max_tokens": maxTokens, "temperature": 0, "stop": []string{}}}, &f)
		return f.RequestID
	}
	poll := func(clone, cursor int64, timeout any) pollReply {
		body := map[string]any{"target": map[string]any{"type": "sampling_session", "sampling_session_id": sampler, "cloned_sampler_id": clone},
			"prev_cursor": cursor, "retrieved_request_ids": []string{}}
		if timeout != nil {
			body["timeout"] = timeout
		}
		var out pollReply
		h.a.Post("/api/v1/retrieve_futures", body, &out)
		return out
	}
	// Counters for clones: 1, 2, … (the original client is 0).
	var counters []int64
	for i := 0; i < 2; i++ {
		var j struct {
			ClientCounter int64  `json:"client_counter"`
			Type          string `json:"type"`
		}
		h.a.Post("/api/v1/join_sampling_session", map[string]any{"sampling_session_id": sampler, "type": "join_sampling_session"}, &j)
		counters = append(counters, j.ClientCounter)
	}
	if fmt.Sprint(counters) != "[1 2]" {
		t.Fatalf("clone counters %v, want [1 2]", counters)
	}
	if r := h.b.Do("POST", "/api/v1/join_sampling_session", map[string]any{"sampling_session_id": sampler}, nil); r.Status != 404 {
		t.Fatalf("another tenant joins: %d %s", r.Status, r.Body)
	}

	a, b := sample(1, 2), sample(2, 2)
	clone := sample(counters[0]*1_000_000_000+1, 2)
	got := map[string]string{}
	var cursor int64
	for len(got) < 2 {
		p := poll(0, cursor, nil) // long poll: returns as soon as something resolved
		for _, c := range p.Completions {
			if c.State != "finished" || c.Size == nil || *c.Size <= 0 {
				t.Fatalf("completion %+v", c)
			}
			got[c.RequestID] = c.State
		}
		if p.Cursor < cursor {
			t.Fatalf("cursor went back: %d < %d", p.Cursor, cursor)
		}
		cursor = p.Cursor
	}
	if got[a] == "" || got[b] == "" || got[clone] != "" {
		t.Fatalf("clone 0 completions %v (a %s, b %s, clone %s)", got, a, b, clone)
	}
	// Acknowledged completions are gone; nothing new: timeout 0 answers at once.
	t0 := time.Now()
	if p := poll(0, cursor, 0); len(p.Completions) != 0 || p.Cursor != cursor {
		t.Fatalf("after the ack: %+v", p)
	}
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("an ack-only poll (timeout 0) took %v", d)
	}
	// A poll from the start again sees nothing: what was acknowledged was trimmed.
	if p := poll(0, 0, 0); len(p.Completions) != 0 {
		t.Fatalf("trimmed completions came back: %+v", p)
	}
	// The clone's completion is on its own log.
	p := poll(counters[0], 0, nil)
	if len(p.Completions) != 1 || p.Completions[0].RequestID != clone {
		t.Fatalf("clone 1's poll: %+v", p)
	}
	// A held poll returns with the next completion.
	done := make(chan pollReply, 1)
	go func() { done <- poll(0, cursor, 20) }()
	c := sample(3, 1)
	select {
	case p := <-done:
		if len(p.Completions) != 1 || p.Completions[0].RequestID != c {
			t.Fatalf("held poll: %+v, want %s", p, c)
		}
		cursor = p.Cursor
	case <-time.After(15 * time.Second):
		t.Fatal("the held poll did not return with the new completion")
	}
	// A failed request is reported as failed: a sample cancelled while queued or running.
	f := sample(4, 2000)
	var cr struct{ State string }
	h.a.Post("/api/v1/cancel_future", map[string]any{"request_id": f}, &cr)
	if cr.State == "" {
		t.Fatal("cancel_future gave no state")
	}
	state := ""
	for i := 0; i < 5 && state == ""; i++ {
		p := poll(0, cursor, nil)
		for _, c := range p.Completions {
			if c.RequestID == f {
				state = c.State
			}
		}
		cursor = p.Cursor
	}
	if state != "failed" {
		t.Fatalf("the cancelled sample (%s) was reported %q, want failed", cr.State, state)
	}

	for _, bad := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"prev_cursor": 0}, "target is required"},
		{map[string]any{"target": map[string]any{"type": "training_run", "sampling_session_id": sampler}}, "target.type"},
		{map[string]any{"target": map[string]any{"sampling_session_id": sampler}, "timeout": -1}, "timeout"},
		{map[string]any{"target": map[string]any{"sampling_session_id": sampler}, "prev_cursor": -3}, "prev_cursor"},
	} {
		if r := h.a.Do("POST", "/api/v1/retrieve_futures", bad.body, nil); r.Status != 400 || !strings.Contains(string(r.Body), bad.want) {
			t.Errorf("%v: %d %s, want 400 naming %s", bad.body, r.Status, r.Body, bad.want)
		}
	}
	if r := h.b.Do("POST", "/api/v1/retrieve_futures", map[string]any{"target": map[string]any{"sampling_session_id": sampler}}, nil); r.Status != 404 {
		t.Fatalf("another tenant polls: %d %s", r.Status, r.Body)
	}
	h.a.Post("/api/v1/sessions/"+sess+"/finish", map[string]any{"reason": map[string]any{"type": "success"}}, nil)
	if r := h.a.Do("POST", "/api/v1/retrieve_futures", map[string]any{"target": map[string]any{"sampling_session_id": sampler}}, nil); r.Status != 410 {
		t.Fatalf("poll of a finished session: %d %s", r.Status, r.Body)
	}
}

// cancel_future: a sample stops at once (queued or running) and its future fails saying
// so; a training operation cannot be cancelled; an unknown id is 404.
func TestCancelFuture(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sess := h.session(h.a)
	sampler := h.sampler(h.a, sess, 0)
	var f sampleFuture
	h.a.Post("/api/v1/asample", map[string]any{"sampling_session_id": sampler, "seq_id": 1, "num_samples": 8, "prompt": prompt(1, 2, 3),
		"sampling_params": map[string]any{"max_tokens": 1000, "stop": []string{}, "temperature": 1}}, &f)
	var cr struct {
		RequestID string `json:"request_id"`
		State     string `json:"state"`
	}
	h.a.Post("/api/v1/cancel_future", map[string]any{"request_id": f.RequestID}, &cr)
	if cr.RequestID != f.RequestID || (cr.State != "cancelled_queued" && cr.State != "cancelled_running") {
		t.Fatalf("cancel reply %+v", cr)
	}
	r := h.a.Wait(f.RequestID, "")
	var out map[string]any
	_ = json.Unmarshal(r.Body, &out)
	if msg, _ := out["error"].(string); !strings.Contains(msg, "cancelled by the client") || out["category"] != "user" {
		t.Fatalf("cancelled sample's result: %d %s", r.Status, r.Body)
	}
	if r := h.a.Do("POST", "/api/v1/cancel_future", map[string]any{"request_id": "req_nope"}, nil); r.Status != 404 {
		t.Fatalf("unknown future: %d %s", r.Status, r.Body)
	}
	if r := h.b.Do("POST", "/api/v1/cancel_future", map[string]any{"request_id": f.RequestID}, nil); r.Status != 404 {
		t.Fatalf("another tenant's future: %d %s", r.Status, r.Body)
	}
	model := h.model(h.a, sess, 0, 4)
	var tf future
	h.a.Post("/api/v1/forward_backward", fwdbwdJSON(model, 1, datum(1, 8)), &tf)
	if r := h.a.Do("POST", "/api/v1/cancel_future", map[string]any{"request_id": tf.RequestID}, nil); r.Status != 400 && r.Status != 200 {
		t.Fatalf("cancel a training operation: %d %s", r.Status, r.Body)
	} else if r.Status == 400 && !strings.Contains(string(r.Body), "only sampling requests") {
		t.Fatalf("cancel a training operation: %s", r.Body)
	}
	h.a.Result(tf.RequestID, nil) // it ran to its end
	// The model serves the next sample normally.
	h.a.Post("/api/v1/asample", map[string]any{"sampling_session_id": sampler, "seq_id": 2, "num_samples": 1, "prompt": prompt(1, 2, 3),
		"sampling_params": map[string]any{"max_tokens": 2}}, &f)
	h.a.Result(f.RequestID, nil)
}
