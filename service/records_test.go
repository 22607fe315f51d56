package service

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv/check"
)

// goldenRecords are one record of each stored kind, every field set, as the store holds
// them. testdata/records/<name>.json is their JSON: a change to it is a change to the
// stored schema, which every store written by an earlier version must survive.
func goldenRecords() map[string]any {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	exp := t0.Add(time.Hour)
	detail := "done"
	md, _ := NewMetadata(map[string]any{"k": "v"})
	lora := LoraRecord{Rank: 8, Alpha: 8, Seed: 7, TrainAttn: true, TrainMLP: true, Optimizer: OptimizerRecord{Type: "dimuon", Version: 1}}
	return map[string]any{
		"session": &Session{ID: "sess_1", Tenant: "alice", Tags: []string{"a"}, UserMetadata: md, SDKVersion: "0.38.0",
			ProjectID: "p", CreatedAt: t0, LastHeartbeat: t0, Expired: true, Extra: map[string]string{"x": "y"}, Owner: "r1", DisplayName: "d",
			Finished: &SessionFinish{Reason: FinishSuccess, Detail: &detail, At: t0}},
		"run": &Run{ID: "sess_1:train:0", Owner: "r1", Tenant: "alice", SessionID: "sess_1", ModelSeqID: 0, BaseModel: "tiny", Lora: lora,
			UserMetadata: md, CreatedAt: t0, LastRequestTime: t0, NextSeq: 5, State: RunReady,
			AutosaveSeq: 4, AutosaveAt: t0, EphemeralCount: 2, RequestID: "req_1", CreatePayload: "h", LastCheckpoint: "weights/a", LastSamplerCkpt: "sampler_weights/b",
			Optimizer: "dimuon", ProjectID: "p", Inflight: true, LoadedFrom: &LoadSource{Path: "tinker://x:train:0/weights/c", Dir: "/ck/x/weights/c", Optimizer: true}},
		"checkpoint": &Checkpoint{RunID: "sess_1:train:0", Tenant: "alice", Type: CkptTraining, Name: "a", Dir: "/ck/sess_1:train:0/weights/a", CreatedAt: t0,
			SizeBytes: 1234, Public: true, ExpiresAt: &exp, SeqID: 4, BaseModel: "tiny", Lora: lora,
			UserMetadata: map[string]string{"k": "v"}, Optimizer: "dimuon", Encrypted: true},
		"sampler": &Sampler{ID: "sess_1:sample:0", Owner: "r1", Tenant: "alice", SessionID: "sess_1", SeqID: 0, BaseModel: "tiny", ModelPath: "tinker://sess_1:train:0/sampler_weights/b",
			AdapterDir: "/ck/x", Lora: true, Ephemeral: true, RunID: "sess_1:train:0", CreatedAt: t0, Closed: true, ClosedWhy: "why", Inflight: true, AdapterID: "sess_1:train:0/inflight", Clients: 2},
		"signature": &signature{Models: map[string]string{"tiny": "sha256:abc"}},
		"copy":      &copyRecord{PayloadHash: "h", Path: "tinker://copy_1/weights/a"},
		"replica":   &replicaRecord{ID: "r1", URL: "http://127.0.0.1:10610", Started: t0},
	}
}

func TestStoredRecordSchema(t *testing.T) {
	for name, rec := range goldenRecords() {
		got, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		path := filepath.Join("testdata", "records", name+".json")
		if !check.Golden(t, path, got) {
			t.Errorf("the stored %s record's JSON changed: a stored schema change needs a migration in its loader and a new golden", name)
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// And it reads back into the same record.
		back := reflect.New(reflect.TypeOf(rec).Elem()).Interface()
		if err := json.Unmarshal(want, back); err != nil || !reflect.DeepEqual(back, rec) {
			t.Errorf("%s does not read back: %v\n%+v", path, err, back)
		}
	}
}

// Run records written before RunState (the JSON of the code as of 2026-11-23, in
// testdata/records/run_legacy_*.json) load with their state migrated.
func TestRunRecordMigration(t *testing.T) {
	for name, want := range map[string]RunState{
		"run_legacy_ready": RunReady, "run_legacy_creating": RunCreating, "run_legacy_unloaded": RunUnloaded, "run_legacy_corrupted": RunCorrupted,
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "records", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var r Run
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.State != want {
			t.Errorf("%s: state %q, want %q", name, r.State, want)
		}
	}
	// Apart from the state's spelling, the legacy ready run is the golden run.
	b, _ := os.ReadFile(filepath.Join("testdata", "records", "run_legacy_ready.json"))
	var legacy Run
	if err := json.Unmarshal(b, &legacy); err != nil {
		t.Fatal(err)
	}
	if golden := goldenRecords()["run"].(*Run); !reflect.DeepEqual(&legacy, golden) {
		t.Errorf("migrated legacy run:\n%+v\nwant:\n%+v", legacy, *golden)
	}
	var r Run
	if err := json.Unmarshal([]byte(`{"id":"x","state":"sleeping"}`), &r); err == nil {
		t.Error("a run record with an unknown state was accepted")
	}
}

// LoraRecord converts to and from the engine's configuration without loss.
func TestLoraRecordRoundTrip(t *testing.T) {
	l := goldenRecords()["run"].(*Run).Lora
	if back := loraRecord(l.engine()); back != l {
		t.Fatalf("round trip: %+v, want %+v", back, l)
	}
}
