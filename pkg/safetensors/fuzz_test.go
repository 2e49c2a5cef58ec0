package safetensors

import (
	"testing"
)

// FuzzParseHeader feeds arbitrary headers and data-section lengths to the header
// parser, which must return an error or a layout that covers the data exactly, and never
// panic. The seeds run as an ordinary test.
func FuzzParseHeader(f *testing.F) {
	seeds := []struct {
		hdr     string
		dataLen int64
	}{
		{`{}`, 0},
		{`{"__metadata__":{"format":"pt"}}   `, 0},
		{`{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`, 16},
		{`{"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"I64","shape":[],"data_offsets":[6,14]}}`, 14},
		{`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, 0},
		{`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12},
		{`{"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12},
		{`{"a":{"dtype":"X","shape":[2],"data_offsets":[0,8]}}`, 8},
		{`{"a":{"dtype":"F32","shape":[9223372036854775807,2],"data_offsets":[0,8]}}`, 8},
		{`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,99999999999999999999]}}`, 8},
		{`{"a":1}`, 0},
		{`{"a":`, 0},
		{`[]`, 0},
		{``, 0},
		{"{\"a\xff\":1}", 0},
		{`{"__metadata__":{"a":["b"]}}`, 0},
	}
	for _, s := range seeds {
		f.Add([]byte(s.hdr), s.dataLen)
	}
	f.Fuzz(func(t *testing.T, hdr []byte, dataLen int64) {
		if dataLen < 0 {
			dataLen = -dataLen
			if dataLen < 0 {
				dataLen = 0
			}
		}
		infos, _, err := parseHeader("fuzz", hdr, 8, dataLen)
		if err != nil {
			return
		}
		var total int64
		for i, in := range infos {
			if i > 0 && infos[i-1].Name >= in.Name {
				t.Fatalf("names not sorted: %q then %q", infos[i-1].Name, in.Name)
			}
			size, ok := in.DType.Size()
			if !ok || int64(in.NumElements()*size) != in.Size {
				t.Fatalf("tensor %q: dtype %s shape %v size %d", in.Name, in.DType, in.Shape, in.Size)
			}
			if in.Offset < 8 || in.Offset+in.Size > 8+dataLen {
				t.Fatalf("tensor %q out of range", in.Name)
			}
			total += in.Size
		}
		if total != dataLen {
			t.Fatalf("tensors cover %d bytes of %d", total, dataLen)
		}
	})
}
