package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Reading a configuration: YAML over the defaults (unknown keys are errors naming their
// path), defaults that depend on other fields, then the environment overrides.

// DefaultHome is TUFT_HOME, else ~/.tuft.
func DefaultHome() string {
	if h := os.Getenv("TUFT_HOME"); h != "" {
		return h
	}
	if u, err := os.UserHomeDir(); err == nil {
		return filepath.Join(u, ".tuft")
	}
	return ".tuft"
}

// Load reads a YAML file over the defaults. Unknown keys are errors naming their path.
func Load(path, home string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data, home)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes YAML over the defaults, then fills derived defaults and validates.
func Parse(data []byte, home string) (Config, error) {
	c := Default(home)
	if len(bytes.TrimSpace(data)) > 0 {
		var root yaml.Node
		if err := yaml.Unmarshal(data, &root); err != nil {
			return Config{}, fmt.Errorf("invalid YAML: %w", err)
		}
		if len(root.Content) > 0 {
			if err := checkKeys(root.Content[0], reflect.TypeOf(c), ""); err != nil {
				return Config{}, err
			}
			// Models given in the file replace the default list rather than merge into it.
			c.Models = nil
			if err := root.Content[0].Decode(&c); err != nil {
				return Config{}, fmt.Errorf("invalid value: %w", err)
			}
		}
	}
	c.fill()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// checkKeys walks the YAML mapping against the struct's yaml tags and reports the first
// unknown key by its full path.
func checkKeys(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
				return nil
			}
			return fmt.Errorf("%s: expected a mapping", displayPath(path))
		}
		fields := map[string]reflect.Type{}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if name == "" || name == "-" {
				continue
			}
			fields[name] = f.Type
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			ft, ok := fields[k]
			if !ok {
				return fmt.Errorf("unknown key %q", joinPath(path, k))
			}
			if err := checkKeys(n.Content[i+1], ft, joinPath(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind == yaml.SequenceNode {
			for i, e := range n.Content {
				if err := checkKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func joinPath(p, k string) string {
	if p == "" {
		return k
	}
	return p + "." + k
}

func displayPath(p string) string {
	if p == "" {
		return "document"
	}
	return p
}

// fill sets defaults that depend on other fields.
func (c *Config) fill() {
	if c.CheckpointDir == "" {
		c.CheckpointDir = filepath.Join(c.Home, "checkpoints")
	}
	c.CheckpointDir = expandHome(c.CheckpointDir)
	if c.Persistence.Mode == "embedded" && c.Persistence.Path == "" {
		c.Persistence.Path = filepath.Join(c.Home, "tuft.db")
	}
	c.Persistence.Path = expandHome(c.Persistence.Path)
	// A zero (or absent) worker interval means config.Default()'s, read from there so that
	// the number lives in one place.
	d := Default(c.Home)
	for _, f := range []struct{ v, def *Seconds }{{&c.Workers.CallTimeoutSeconds, &d.Workers.CallTimeoutSeconds},
		{&c.Workers.StartTimeoutSeconds, &d.Workers.StartTimeoutSeconds}, {&c.Workers.CheckSeconds, &d.Workers.CheckSeconds},
		{&c.Worker.HeartbeatSeconds, &d.Worker.HeartbeatSeconds}} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if c.Worker.Listen == "" {
		c.Worker.Listen = d.Worker.Listen
	}
	for i := range c.Models {
		m := &c.Models[i]
		m.Path = expandHome(m.Path)
		if m.MaxLoraRank == 0 {
			m.MaxLoraRank = 64
		}
		if m.LoraAlphaRatio == 0 {
			m.LoraAlphaRatio = 1
		}
	}
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if u, err := os.UserHomeDir(); err == nil {
			return filepath.Join(u, strings.TrimPrefix(p, "~"))
		}
	}
	return p
}

// ApplyEnv overrides settings from TUFT_HOST, TUFT_PORT, TUFT_LOG_LEVEL,
// TUFT_CHECKPOINT_DIR and TUFT_DEVICE (flags are applied after this by the caller).
func (c *Config) ApplyEnv() error {
	if v := os.Getenv("TUFT_HOST"); v != "" {
		c.Server.Host = v
	}
	if v := os.Getenv("TUFT_PORT"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("TUFT_PORT: %q is not a number", v)
		}
		c.Server.Port = p
	}
	if v := os.Getenv("TUFT_REPLICA_ID"); v != "" {
		c.Server.ReplicaID = v
	}
	if v := os.Getenv("TUFT_REPLICA_URL"); v != "" {
		c.Server.ReplicaURL = v
	}
	if v := os.Getenv("TUFT_LOG_LEVEL"); v != "" {
		c.Server.LogLevel = strings.ToLower(v)
	}
	if v := os.Getenv("TUFT_CHECKPOINT_DIR"); v != "" {
		c.CheckpointDir = expandHome(v)
	}
	if v := os.Getenv("TUFT_DEVICE"); v != "" {
		if !deviceName.MatchString(v) {
			return fmt.Errorf("TUFT_DEVICE: %q is not one of auto, cpu, cuda, cuda:N", v)
		}
		c.Engine.Device = v
	}
	return nil
}
