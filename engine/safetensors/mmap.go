package safetensors

import "os"

// Mapped is a safetensors file opened for streaming: its tensors' Data alias a read-only
// memory map of the file (or, where mmap does not exist, were read whole). Release a
// tensor's pages once it has been consumed so that reading a model tensor by tensor keeps
// at most about one tensor of it resident in this process; Close unmaps the file, after
// which the tensors' Data must not be touched.
type Mapped struct {
	*File
	mapping []byte // nil when the file was read, not mapped
}

// Open maps path and decodes its header; nothing of the data is read until a tensor's
// Data is.
func Open(path string) (*Mapped, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	out, offs, err := readHeader(f, fi.Size(), path)
	if err != nil {
		return nil, err
	}
	m, err := mapFile(f, fi.Size())
	if err != nil {
		return nil, err
	}
	if m == nil { // no mmap here: read the data
		for i := range out.Tensors {
			buf := make([]byte, offs[i][1]-offs[i][0])
			if _, err := f.ReadAt(buf, offs[i][0]); err != nil {
				return nil, err
			}
			out.Tensors[i].Data = buf
		}
		return &Mapped{File: out}, nil
	}
	for i := range out.Tensors {
		out.Tensors[i].Data = m[offs[i][0]:offs[i][1]:offs[i][1]]
	}
	return &Mapped{File: out, mapping: m}, nil
}

// Release drops t's pages from this process (they stay in the page cache): t's Data
// reads the file again if touched later. A no-op for a tensor of a file that was read.
func (m *Mapped) Release(t Tensor) {
	if m.mapping != nil && len(t.Data) > 0 {
		dropPages(m.mapping, t.Data)
	}
}

// Close unmaps the file.
func (m *Mapped) Close() error {
	if m.mapping == nil {
		return nil
	}
	err := unmapFile(m.mapping)
	m.mapping = nil
	return err
}
