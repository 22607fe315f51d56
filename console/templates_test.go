package console_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	scriptTag   = regexp.MustCompile(`(?is)<script\b([^>]*)>(.*?)</script\s*>`)
	handlerAttr = regexp.MustCompile(`(?i)<[^>]*\son[a-z]+\s*=`)
	styleAttr   = regexp.MustCompile(`(?i)<[^>]*\sstyle\s*=`)
	styleTag    = regexp.MustCompile(`(?i)<style\b`)
	jsURL       = regexp.MustCompile(`(?i)javascript:`)
)

// inlineScript names what a strict CSP would refuse in an HTML text: a script without src
// or with a body, an event-handler or style attribute, a style element, a javascript: URL.
func inlineScript(html string) string {
	for _, m := range scriptTag.FindAllStringSubmatch(html, -1) {
		if !strings.Contains(m[1], "src=") || strings.TrimSpace(m[2]) != "" {
			return "inline <script>: " + m[0]
		}
	}
	if strings.Count(strings.ToLower(html), "<script") != len(scriptTag.FindAllString(html, -1)) {
		return "unclosed <script>"
	}
	for _, re := range []*regexp.Regexp{handlerAttr, styleAttr, styleTag, jsURL} {
		if m := re.FindString(html); m != "" {
			return "inline code or style: " + m
		}
	}
	return ""
}

func TestNoInlineScriptInTemplates(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("templates/*.html")
	if err != nil || len(files) == 0 {
		t.Fatalf("templates: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if msg := inlineScript(string(b)); msg != "" {
			t.Errorf("%s: %s", f, msg)
		}
	}
}

// The check sees what it forbids.
func TestInlineScriptCheckFindsInlineCode(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{`<script>alert(1)</script>`, `<script src="/x.js">alert(1)</script>`, `<a href="#" onclick="x()">`,
		`<div style="color:red">`, `<style>p{}</style>`, `<a href="javascript:alert(1)">`, `<script src="/x.js">`} {
		if inlineScript(bad) == "" {
			t.Errorf("%s passed", bad)
		}
	}
	if msg := inlineScript(`<script src="/console/static/a.js" defer></script><a href="/x" class="y">`); msg != "" {
		t.Errorf("clean HTML refused: %s", msg)
	}
}

// The scripts put text into the page only as text: no HTML parsing sinks, no eval.
func TestScriptsUseNoHTMLSinks(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("static/*.js")
	if err != nil || len(files) == 0 {
		t.Fatalf("scripts: %v %v", files, err)
	}
	sink := regexp.MustCompile(`\.(innerHTML|outerHTML|insertAdjacentHTML)\b|document\.write|\beval\(|new Function\(|setTimeout\(\s*["']|setInterval\(\s*["']`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := sink.FindString(string(b)); m != "" {
			t.Errorf("%s uses %s", f, m)
		}
	}
}
