package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
)

// Entry describes one tensor of a file written piece by piece: its bytes are produced
// later, by WriteParallel's fill function.
type Entry struct {
	Name  string
	DType string
	Shape []int
}

// bytes is the size of e's data.
func (e Entry) bytes() (int64, error) {
	w, ok := dtypeSize[e.DType]
	if !ok {
		return 0, fmt.Errorf("safetensors: tensor %s: unknown dtype %q", e.Name, e.DType)
	}
	n := int64(w)
	for _, d := range e.Shape {
		if d < 0 {
			return 0, fmt.Errorf("safetensors: tensor %s: negative dimension in shape %v", e.Name, e.Shape)
		}
		n *= int64(d)
	}
	return n, nil
}

// EncodeHeader returns the start of a safetensors file — the 8-byte header length and
// the JSON header, padded to a multiple of 8 — for tensors laid out in name order, as
// Encode lays them out, and the absolute file offset of each entry's data (offsets[i]
// belongs to entries[i]).
func EncodeHeader(entries []Entry, metadata map[string]string) (prefix []byte, offsets []int64, err error) {
	order := make([]int, len(entries))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return entries[order[a]].Name < entries[order[b]].Name })
	hdr := map[string]any{}
	if len(metadata) > 0 {
		hdr["__metadata__"] = metadata
	}
	rel := make([]int64, len(entries))
	var off int64
	for _, i := range order {
		e := entries[i]
		if e.Name == "" || e.Name == "__metadata__" {
			return nil, nil, fmt.Errorf("safetensors: invalid tensor name %q", e.Name)
		}
		if _, dup := hdr[e.Name]; dup {
			return nil, nil, fmt.Errorf("safetensors: duplicate tensor %q", e.Name)
		}
		n, err := e.bytes()
		if err != nil {
			return nil, nil, err
		}
		shape := e.Shape
		if shape == nil {
			shape = []int{}
		}
		hdr[e.Name] = headerEntry{DType: e.DType, Shape: shape, DataOffsets: [2]int64{off, off + n}}
		rel[i] = off
		off += n
	}
	hb, err := json.Marshal(hdr)
	if err != nil {
		return nil, nil, err
	}
	if pad := (8 - len(hb)%8) % 8; pad > 0 {
		hb = append(hb, []byte(strings.Repeat(" ", pad))...)
	}
	prefix = make([]byte, 8, 8+len(hb))
	binary.LittleEndian.PutUint64(prefix, uint64(len(hb)))
	prefix = append(prefix, hb...)
	for i := range rel {
		rel[i] += int64(len(prefix))
	}
	return prefix, rel, nil
}

// ChunkBytes is the most bytes one call of WriteParallel's fill produces: a multiple of
// every element size, so a chunk never splits an element.
const ChunkBytes = 4 << 20

// WriteParallel writes a safetensors file atomically (temp file, fsync, rename) without
// holding any tensor in memory: fill(i, first, dst) writes the bytes of elements first…
// of entries[i] into dst (at most ChunkBytes, whole elements). Up to workers calls run
// at once (GOMAXPROCS when workers ≤ 0), each into its own buffer written at its offset,
// so the file's bytes do not depend on workers as long as fill's output depends only on
// its arguments.
func WriteParallel(path string, entries []Entry, metadata map[string]string, workers int,
	fill func(i int, first int64, dst []byte) error) error {
	prefix, offsets, err := EncodeHeader(entries, metadata)
	if err != nil {
		return err
	}
	type chunk struct {
		i          int
		first, off int64 // first element; file offset
		n          int   // bytes
	}
	var chunks []chunk
	size := int64(len(prefix))
	for i, e := range entries {
		n, _ := e.bytes() // checked by EncodeHeader
		w := int64(dtypeSize[e.DType])
		for b := int64(0); b < n; b += ChunkBytes {
			chunks = append(chunks, chunk{i: i, first: b / w, off: offsets[i] + b, n: int(min(ChunkBytes, n-b))})
		}
		size += n
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	fail := func(err error) error {
		tmp.Close()
		return err
	}
	if _, err := tmp.WriteAt(prefix, 0); err != nil {
		return fail(err)
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	jobs := make(chan chunk)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	setErr := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	for range min(workers, max(1, len(chunks))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, ChunkBytes)
			for c := range jobs {
				dst := buf[:c.n]
				if err := fill(c.i, c.first, dst); err != nil {
					setErr(fmt.Errorf("safetensors: tensor %s: %w", entries[c.i].Name, err))
					continue
				}
				if _, err := tmp.WriteAt(dst, c.off); err != nil {
					setErr(err)
				}
			}
		}()
	}
	for _, c := range chunks {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		jobs <- c
	}
	close(jobs)
	wg.Wait()
	if first != nil {
		return fail(first)
	}
	if fi, err := tmp.Stat(); err != nil {
		return fail(err)
	} else if fi.Size() != size {
		return fail(fmt.Errorf("safetensors: wrote %d bytes, want %d", fi.Size(), size))
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
