package config

import (
	"strings"
	"testing"
	"time"
)

// The *_seconds keys keep their plain-number spelling: a fraction, an integer, and the
// default when the key is absent.
func TestSecondsDecodesThePlainNumber(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("models: [{name: a, preset: tiny}]\nserver:\n  read_header_timeout_seconds: 0.25\n  idle_timeout_seconds: 90\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Server.ReadHeaderTimeoutSeconds.Duration(); got != 250*time.Millisecond {
		t.Errorf("read_header_timeout_seconds 0.25 = %v", got)
	}
	if got := c.Server.IdleTimeoutSeconds.Duration(); got != 90*time.Second {
		t.Errorf("idle_timeout_seconds 90 = %v", got)
	}
	if got := c.Workers.CallTimeoutSeconds.Duration(); got != 10*time.Minute {
		t.Errorf("workers.call_timeout_seconds default = %v", got)
	}
	if _, err := Parse([]byte("models: [{name: a, preset: tiny}]\nserver:\n  idle_timeout_seconds: 30s\n"), t.TempDir()); err == nil {
		t.Error("a unit suffix was accepted; the keys take a number of seconds")
	}
}

// A zero worker interval in the file means the default, read from config.Default().
func TestZeroWorkerIntervalsTakeTheDefault(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("models: [{name: a, preset: tiny}]\nworkers:\n  call_timeout_seconds: 0\n  check_seconds: 0\nworker:\n  heartbeat_seconds: 0\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := Default("")
	if c.Workers.CallTimeoutSeconds != d.Workers.CallTimeoutSeconds || c.Workers.CheckSeconds != d.Workers.CheckSeconds ||
		c.Worker.HeartbeatSeconds != d.Worker.HeartbeatSeconds {
		t.Fatalf("workers %+v worker %+v", c.Workers, c.Worker)
	}
}

func TestMustPositiveNamesTheKey(t *testing.T) {
	t.Parallel()
	MustPositive("limits.x", 1)
	MustPositive("limits.y", time.Second)
	for _, f := range []func(){func() { MustPositive("limits.max_x", 0) }, func() { MustPositive("server.y_seconds", -time.Second) }} {
		func() {
			defer func() {
				v := recover()
				if s, _ := v.(string); !strings.Contains(s, "limits.max_x") && !strings.Contains(s, "server.y_seconds") {
					t.Errorf("panic %v does not name the key", v)
				}
			}()
			f()
		}()
	}
}

// Each section reports under its own path, every problem at once.
func TestValidateWalksTheSectionsWithTheirPaths(t *testing.T) {
	t.Parallel()
	c := Default(t.TempDir())
	c.Persistence.Path = "/x"
	c.Limits.MaxChatMessages = 0
	c.Engine.Scheduler.TrainShare = 1
	c.Models[0].MaxLoraRank = 0
	c.Workers.Pinned = []PinnedWorker{{Address: "nohost"}}
	c.Auth.APIKeys = []APIKey{{Tenant: "t", KeySHA256: "x"}}
	err := c.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"limits.max_chat_messages: 0 must be at least 1", "engine.scheduler.train_share: 1 must be in (0, 1)",
		"models[0].max_lora_rank: 0 must be in [1, 1024]", `workers.pinned[0].address: "nohost" must be host:port`,
		"auth.api_keys[0].key_sha256: must be"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in\n%v", want, err)
		}
	}
}
