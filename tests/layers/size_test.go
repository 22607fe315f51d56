package layers_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxLines is where a Go file stops reading top to bottom: a longer one is split by
// concern, or says at its top, in a comment starting "Size:", why it is one unit.
const maxLines = 600

// Generated files are exempt; the rest of the module's Go files are held to maxLines.
func TestNoOversizedFilesWithoutAReason(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("git rev-parse: %v (not a git checkout)", err)
	}
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.go").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Fields(string(out)) {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			continue // deleted in the working tree
		}
		n := bytes.Count(b, []byte("\n"))
		if n <= maxLines || generated(b) || hasSizeReason(b) {
			continue
		}
		t.Errorf("%s has %d lines (over %d): split it by concern, or say why at its top (// Size: ...)", name, n, maxLines)
	}
}

// generated follows the Go convention (https://go.dev/s/generatedcode).
func generated(b []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "package ") {
			return false
		}
		if strings.HasPrefix(line, "// Code generated ") && strings.HasSuffix(line, " DO NOT EDIT.") {
			return true
		}
	}
	return false
}

// hasSizeReason reports a "// Size:" comment among the file's first 40 lines.
func hasSizeReason(b []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for i := 0; i < 40 && sc.Scan(); i++ {
		if strings.HasPrefix(strings.TrimSpace(sc.Text()), "// Size:") {
			return true
		}
	}
	return false
}
