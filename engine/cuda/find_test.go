package cuda

import (
	"path/filepath"
	"slices"
	"testing"
)

func TestLibraryCandidates(t *testing.T) {
	home := t.TempDir()
	envs := map[string]string{"CUDA_HOME": "/opt/cuda", "VIRTUAL_ENV": "/venv", "HOME": home}
	e := searchEnv{getenv: func(k string) string { return envs[k] }, glob: func(p string) ([]string, error) {
		if p == "/venv/lib/python3*/site-packages" {
			return []string{"/venv/lib/python3.10/site-packages", "/venv/lib/python3.12/site-packages"}, nil
		}
		return nil, nil
	}}
	got := e.libCandidates([]string{"/cfg"}, []string{"libcublas.so.12"}, []string{"nvidia/cublas/lib"})
	want := []string{
		"/cfg/libcublas.so.12",
		"/opt/cuda/lib64/libcublas.so.12",
		"/opt/cuda/lib/libcublas.so.12",
		"/usr/local/cuda/lib64/libcublas.so.12",
		"/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12",
		"/venv/lib/python3.10/site-packages/nvidia/cublas/lib/libcublas.so.12",
		"libcublas.so.12",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("candidates\n%v\nwant\n%v", got, want)
	}
	d := driverCandidates([]string{"/cfg"})
	if d[0] != filepath.Join("/cfg", "libcuda.so.1") || d[1] != "libcuda.so.1" {
		t.Fatalf("driver candidates start %v: the configured directory, then the loader's search", d[:2])
	}
	for _, c := range d {
		if filepath.Dir(c) == "/opt/cuda/lib64" {
			t.Fatalf("driver candidates include CUDA_HOME (%s), whose libcuda is a stub", c)
		}
	}
}
