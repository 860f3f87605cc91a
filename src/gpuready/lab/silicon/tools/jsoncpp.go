package main

// jsoncpp 1.9.5's Value::toStyledString(), which NVIDIA's tools print their JSON with: nvbandwidth -j and dcgmi
// diag -j (DCGM 4's documents in tests/fixtures/dcgm-diag have this layout byte for byte).

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// jsonDouble is jsoncpp 1.9.5's valueToString(double): %.17g, with ".0" added where that leaves no '.' or
// exponent.
func jsonDouble(v float64) string {
	switch {
	case math.IsNaN(v):
		return "null"
	case math.IsInf(v, 1):
		return "1e+9999"
	case math.IsInf(v, -1):
		return "-1e+9999"
	}
	text := strconv.FormatFloat(v, 'g', 17, 64)
	if strings.ContainsAny(text, ".e") {
		return text
	}
	return text + ".0"
}

// jsonString quotes as jsoncpp 1.9.5's valueToQuotedStringN does (emitUTF8 off, its default): the short escapes
// by name, other control characters and everything beyond ASCII as \uXXXX in lowercase hex (UTF-16 surrogate
// pairs above U+FFFF).
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			switch {
			case r < 0x20 || (r >= 0x80 && r < 0x10000):
				fmt.Fprintf(&b, `\u%04x`, r)
			case r >= 0x10000:
				r -= 0x10000
				fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10&0x3ff), 0xdc00+(r&0x3ff))
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// styledJSON is jsoncpp 1.9.5's Value::toStyledString() of v (map[string]any, []any, string, int, float64, nil).
func styledJSON(v any) string {
	var out strings.Builder
	indented := true
	newline := func(depth int) { out.WriteString("\n" + strings.Repeat("\t", depth)) }
	withIndent := func(text string, depth int) {
		if !indented {
			newline(depth)
		}
		out.WriteString(text)
		indented = false
	}
	var write func(v any, depth int)
	write = func(v any, depth int) {
		switch x := v.(type) {
		case map[string]any:
			if len(x) == 0 {
				out.WriteString("{}")
				return
			}
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			withIndent("{", depth)
			for n, k := range keys {
				withIndent(jsonString(k), depth+1)
				out.WriteString(" : ")
				write(x[k], depth+1)
				if n < len(keys)-1 {
					out.WriteString(",")
				}
			}
			withIndent("}", depth)
		case []any:
			if len(x) == 0 {
				out.WriteString("[]")
				return
			}
			withIndent("[", depth)
			for n, item := range x {
				if !indented {
					newline(depth + 1)
				}
				indented = true
				write(item, depth+1)
				indented = false
				if n < len(x)-1 {
					out.WriteString(",")
				}
			}
			withIndent("]", depth)
		case bool:
			out.WriteString(strconv.FormatBool(x))
		case int:
			out.WriteString(strconv.Itoa(x))
		case float64:
			out.WriteString(jsonDouble(x))
		case nil:
			out.WriteString("null")
		default:
			out.WriteString(jsonString(fmt.Sprint(x)))
		}
	}
	write(v, 0)
	return out.String() + "\n"
}
