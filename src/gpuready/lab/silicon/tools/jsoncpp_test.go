package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dcgmFixtures are real dcgmi diag -j documents (tests/fixtures/SOURCES.md, "dcgm-diag").
const dcgmFixtures = "../../../../../tests/fixtures/dcgm-diag"

// Given a real DCGM 4 document's data, styledJSON writes the real bytes: jsoncpp's layout, as dcgmi -j prints it.
func TestStyledJSONWritesDCGMDocuments(t *testing.T) {
	for _, name := range []string{
		"glimmer-burnin__gb10-level2-plugins-allowed.json",
		"glimmer-burnin__gb10-level2-plugins-gated.json",
		"virtualclient__DCGMIIncorrectresults.json",
	} {
		raw, err := os.ReadFile(filepath.Join(dcgmFixtures, name))
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.UseNumber()
		var doc any
		if err := dec.Decode(&doc); err != nil {
			t.Fatal(err)
		}
		if got := styledJSON(integers(t, doc)); got != string(raw) {
			t.Errorf("%s: written differently:\n%s", name, got)
		}
	}
}

// integers is doc with its numbers as int, as dcgmi's documents hold them (the captures have no fractions).
func integers(t *testing.T, doc any) any {
	switch v := doc.(type) {
	case map[string]any:
		for k, item := range v {
			v[k] = integers(t, item)
		}
	case []any:
		for i, item := range v {
			v[i] = integers(t, item)
		}
	case json.Number:
		n, err := v.Int64()
		if err != nil {
			t.Fatalf("not an integer: %s", v)
		}
		return int(n)
	}
	return doc
}

// jsonString escapes as jsoncpp does: short escapes by name, other control characters and non-ASCII as \u, the
// slash and DEL as they are.
func TestJSONStringEscapesAsJsoncpp(t *testing.T) {
	got := jsonString("a\"\\\b\f\n\r\t\x01é😀/\x7f")
	want := `"a\"\\\b\f\n\r\t\u0001\u00e9\ud83d\ude00/` + "\x7f" + `"`
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}
