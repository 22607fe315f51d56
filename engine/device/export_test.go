package device

// SetHeadChunkBytes sets the CPU loss head's logits budget for a test and returns the
// function that restores it.
func SetHeadChunkBytes(n int) (restore func()) {
	old := headChunkBytes
	headChunkBytes = n
	return func() { headChunkBytes = old }
}

// HeadChunk is headChunk, for tests.
var HeadChunk = headChunk
