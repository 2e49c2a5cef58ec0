package safetensors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"unicode/utf8"
)

// MaxHeaderSize is the largest JSON header accepted (100 MB), as in the reference
// implementation; a larger length prefix means a corrupt or hostile file.
const MaxHeaderSize = 100 << 20

// metadataKey is the reserved header key holding the free-form string map.
const metadataKey = "__metadata__"

// rawEntry is one tensor's header entry as written in JSON.
type rawEntry struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// parseHeader decodes and validates a JSON header. file names the file in errors,
// dataStart is the absolute offset of the data section (8 + header length) and dataLen
// its length in bytes. It returns the tensors sorted by name, with absolute offsets,
// and the __metadata__ map (nil when absent).
//
// Every tensor's byte count must match its dtype and shape, and the tensors must cover
// [0, dataLen) exactly: no overlaps, no holes, nothing past the end, nothing left over.
func parseHeader(file string, hdr []byte, dataStart, dataLen int64) ([]Info, map[string]string, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("safetensors: %s: "+format, append([]any{file}, a...)...)
	}
	if !utf8.Valid(hdr) {
		return nil, nil, fail("header is not valid UTF-8")
	}
	trimmed := bytes.TrimLeft(hdr, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, nil, fail("header is not a JSON object (it must start with '{')")
	}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, nil, fail("invalid JSON header: %v", err)
	}
	var infos []Info
	var meta map[string]string
	seen := make(map[string]bool)
	// begins keeps each tensor's relative [begin, end) for the coverage check.
	type span struct {
		name       string
		begin, end int64
	}
	var spans []span
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fail("invalid JSON header: %v", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, nil, fail("invalid JSON header: expected a key, got %v", tok)
		}
		if seen[key] {
			return nil, nil, fail("header key %q appears twice", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, fail("invalid JSON header at key %q: %v", key, err)
		}
		if key == metadataKey {
			if err := json.Unmarshal(raw, &meta); err != nil {
				return nil, nil, fail("__metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		if key == "" {
			return nil, nil, fail("header has a tensor with an empty name")
		}
		var e rawEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, nil, fail("tensor %q: invalid header entry: %v", key, err)
		}
		if e.DType == nil || e.Shape == nil || e.DataOffsets == nil {
			return nil, nil, fail("tensor %q: header entry needs dtype, shape and data_offsets", key)
		}
		dt := DType(*e.DType)
		size, ok := dt.Size()
		if !ok {
			return nil, nil, fail("tensor %q: unknown dtype %q (known: %s)", key, *e.DType, knownDTypes)
		}
		shape := make([]int, len(*e.Shape))
		numel := int64(1)
		for i, d := range *e.Shape {
			if d < 0 {
				return nil, nil, fail("tensor %q: negative dimension %d in shape %v", key, d, *e.Shape)
			}
			if d > 0 && numel > math.MaxInt64/int64(size)/d {
				return nil, nil, fail("tensor %q: shape %v is too large", key, *e.Shape)
			}
			numel *= d
			shape[i] = int(d)
		}
		off := *e.DataOffsets
		if len(off) != 2 {
			return nil, nil, fail("tensor %q: data_offsets must be [begin, end], got %v", key, off)
		}
		begin, end := off[0], off[1]
		if begin < 0 || end < begin {
			return nil, nil, fail("tensor %q: invalid data_offsets [%d, %d]", key, begin, end)
		}
		if want := numel * int64(size); end-begin != want {
			return nil, nil, fail("tensor %q: dtype %s shape %v needs %d bytes but data_offsets [%d, %d] span %d",
				key, dt, *e.Shape, want, begin, end, end-begin)
		}
		if end > dataLen {
			return nil, nil, fail("tensor %q: data_offsets [%d, %d] run past the end of the data section (%d bytes): file truncated or offsets out of range",
				key, begin, end, dataLen)
		}
		infos = append(infos, Info{Name: key, DType: dt, Shape: shape, Offset: dataStart + begin, Size: end - begin})
		spans = append(spans, span{key, begin, end})
	}
	if _, err := dec.Token(); err != nil { // closing brace
		return nil, nil, fail("invalid JSON header: %v", err)
	}
	if rest := bytes.TrimLeft(hdr[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return nil, nil, fail("invalid JSON header: unexpected data after the top-level object")
	}
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].begin != spans[j].begin {
			return spans[i].begin < spans[j].begin
		}
		return spans[i].end < spans[j].end
	})
	var pos int64
	prev := ""
	for _, s := range spans {
		switch {
		case s.begin < pos:
			return nil, nil, fail("tensors %q and %q overlap (%q ends at %d, %q begins at %d)", prev, s.name, prev, pos, s.name, s.begin)
		case s.begin > pos:
			if prev == "" {
				return nil, nil, fail("hole in the data section: bytes [0, %d) before tensor %q belong to no tensor", s.begin, s.name)
			}
			return nil, nil, fail("hole in the data section: bytes [%d, %d) between tensors %q and %q belong to no tensor", pos, s.begin, prev, s.name)
		}
		pos = s.end
		prev = s.name
	}
	if pos != dataLen {
		return nil, nil, fail("data section has %d bytes but the tensors cover only [0, %d): %d trailing bytes belong to no tensor", dataLen, pos, dataLen-pos)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
	for i := range infos {
		infos[i].File = file
	}
	return infos, meta, nil
}
