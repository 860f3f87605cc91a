package main

// What dcgmi diag prints (dcgmi.go runs the tests): the DCGM 4 JSON document in jsoncpp's styled layout (-j,
// jsoncpp.go), or the result table.

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"gpuready.lab/silicon/machine"
)

// diagJSON is the -j document.
func diagJSON(m *machine.Machine, gpus []*machine.GPU, categories []dcgmCategoryRun) string {
	testCategories := []any{}
	for _, c := range categories {
		tests := []any{}
		for _, t := range c.tests {
			rows := []any{}
			for _, r := range t.results {
				row := map[string]any{
					"entity_group": "GPU", "entity_group_id": 1, "entity_id": r.gpu.Index, "status": r.status,
				}
				if len(r.info) > 0 {
					info := []any{}
					for _, line := range r.info {
						info = append(info, line)
					}
					row["info"] = info
				}
				if len(r.warnings) > 0 {
					row["warnings"] = warningsJSON(r.warnings)
				}
				rows = append(rows, row)
			}
			summary := map[string]any{"status": t.status}
			if t.summaryWarnings != nil {
				summary["warnings"] = warningsJSON(t.summaryWarnings)
			}
			tests = append(tests, map[string]any{"name": t.name, "results": rows, "test_summary": summary})
		}
		testCategories = append(testCategories, map[string]any{"category": c.name, "tests": tests})
	}
	entities := []any{}
	for _, g := range gpus {
		entities = append(entities, map[string]any{
			"device_id": deviceID(g), "entity_id": g.Index, "serial_num": serialNum(g),
		})
	}
	doc := map[string]any{
		"DCGM Diagnostic": map[string]any{"test_categories": testCategories},
		"entity_groups": []any{
			map[string]any{"entities": entities, "entity_group": "GPU", "entity_group_id": 1},
		},
		"metadata": map[string]any{"Driver Version Detected": m.DriverVersion(), "version": dcgmVersion},
	}
	return styledJSON(doc)
}

func warningsJSON(warnings []dcgmWarning) []any {
	out := []any{}
	for _, w := range warnings {
		out = append(out, map[string]any{
			"error_category": w.category, "error_id": w.id, "error_severity": w.severity, "warning": w.text,
		})
	}
	return out
}

// deviceID is the GPU's PCI device id as DCGM prints it ("233010DE" -> "2330").
func deviceID(g *machine.GPU) string {
	id := g.PCIDeviceID
	if len(id) > 4 {
		id = id[:4]
	}
	return strings.ToLower(id)
}

// serialNum is the board serial, DCGM's "not supported" value for a GPU without one.
func serialNum(g *machine.GPU) string {
	if g.Serial == "" {
		return "<<<NOT_SUPPORTED>>>"
	}
	return g.Serial
}

// The table's columns: their widths and where long texts wrap.
const (
	tableLeft, tableRight, tableWrap = 27, 48, 45
)

var tableRule = "+" + strings.Repeat("-", tableLeft) + "+" + strings.Repeat("-", tableRight) + "+"

// diagTable is the result table; verbose adds each result's info lines.
func diagTable(m *machine.Machine, gpus []*machine.GPU, categories []dcgmCategoryRun, verbose bool) string {
	ids := make([]string, len(gpus))
	for i, g := range gpus {
		ids[i] = deviceID(g)
	}
	lines := []string{
		"Successfully ran diagnostic for group.",
		tableRule,
		tableRow("Diagnostic", "Result"),
		"+" + strings.Repeat("=", tableLeft) + "+" + strings.Repeat("=", tableRight) + "+",
		tableSection("Metadata", true),
		tableRow("DCGM Version", dcgmVersion),
		tableRow("Driver Version Detected", m.DriverVersion()),
	}
	lines = append(lines, tableWrapped("GPU Device IDs Detected", strings.Join(ids, ", "))...)
	for i, c := range categories {
		lines = append(lines, tableSection(c.name, i == 0))
		for _, t := range c.tests {
			lines = append(lines, tableRow(t.name, t.status))
			for _, r := range t.results {
				for _, w := range r.warnings {
					lines = append(lines, tableWrapped("Warning", w.text)...)
				}
				if verbose {
					for _, info := range r.info {
						lines = append(lines, tableWrapped("Info", strings.ReplaceAll(info, "\t", " "))...)
					}
				}
			}
			for _, r := range t.results {
				lines = append(lines, tableRow("", fmt.Sprintf("GPU%d: %s", r.gpu.Index, r.status)))
			}
		}
	}
	lines = append(lines, tableRule)
	return strings.Join(lines, "\n") + "\n"
}

// padRight is s followed by fill up to width characters (never cut).
func padRight(s string, width int, fill string) string {
	return s + strings.Repeat(fill, max(0, width-utf8.RuneCountInString(s)))
}

func tableRow(left, right string) string {
	return "|" + padRight(" "+left, tableLeft, " ") + "|" + padRight(" "+right, tableRight, " ") + "|"
}

// tableSection is a category's heading row; the first one after the Metadata rule has bars at its ends.
func tableSection(name string, first bool) string {
	label := padRight("-----  "+name+"  ", tableLeft, "-")
	if first {
		return "|" + label + "+" + strings.Repeat("-", tableRight) + "|"
	}
	return "+" + label + "+" + strings.Repeat("-", tableRight) + "+"
}

// tableWrapped is text in rows of at most tableWrap characters, label on the first.
func tableWrapped(label, text string) []string {
	runes := []rune(text)
	var out []string
	for start := 0; start < len(runes) || start == 0; start += tableWrap {
		chunk := string(runes[start:min(start+tableWrap, len(runes))])
		out = append(out, tableRow(label, chunk))
		label = ""
	}
	return out
}
