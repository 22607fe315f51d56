package redisstore_test

import (
	"context"
	"testing"

	"github.com/tuft-go/tuft/store"
	redisstore "github.com/tuft-go/tuft/store/redis"
	"github.com/tuft-go/tuft/store/storetest"
)

func TestConformance(t *testing.T) {
	url := storetest.StartRedis(t)
	storetest.Run(t, func(t *testing.T, ns string) store.Store {
		s, err := redisstore.Open(context.Background(), url, t.Name()+"-"+ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestUnreachableRedisNamesTheURLWithoutPassword(t *testing.T) {
	_, err := redisstore.Open(context.Background(), "redis://user:hunter2@127.0.0.1:1/0", "x")
	if err == nil {
		t.Fatal("connected to nothing")
	}
	if s := err.Error(); !contains(s, "127.0.0.1:1") || contains(s, "hunter2") {
		t.Fatalf("error %q", s)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
